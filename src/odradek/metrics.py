"""The broker's metric registry: plain counters on the hot path, Prometheus families at scrape time.

Request handlers count **per request or per batch, never per record**: a produce adds the number
of records a batch got (its last offset - first offset + 1) and its size in one step.  The
counters are slotted attributes and dict entries (an attribute increment costs tens of
nanoseconds); nothing here takes a lock, builds a label set or formats a name while a request is
handled.  :class:`MetricsCollector` (a ``prometheus_client`` custom collector) turns them into
metric families when ``/metrics`` is scraped, under the names the Prometheus JMX exporter's usual
Kafka rules give Kafka's JMX beans (``kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,
topic=t`` -> ``kafka_server_brokertopicmetrics_messagesin_total{topic="t"}``), so that Kafka
dashboards and alerts work unchanged.  Gauges that are state (partition counts, log sizes,
consumer lag) are not kept here: the broker computes them at scrape time (``extra`` collectors).

Time histograms are kept in milliseconds in fixed buckets and exported twice: as the JMX
exporter exports Kafka's Yammer histograms (a summary with ``quantile`` labels, e.g.
``kafka_network_requestmetrics_totaltimems{request="Produce",quantile="0.99"}``, quantiles
interpolated within the buckets) and as a Prometheus histogram in seconds
(``odradek_request_total_time_seconds_bucket``) for ``histogram_quantile``.

The counters are changed on the event loop thread only.  A scrape copies them there
(:meth:`BrokerMetrics.snapshot`, a few dict copies) and renders the copy on a worker thread, so
that formatting thousands of series never holds the loop.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from odradek.errors import ErrorCode

if TYPE_CHECKING:  # prometheus_client is imported when /metrics is first rendered (~50 ms of imports)
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric

__all__ = [
    "FETCH_FOLLOWER",
    "TIME_BUCKETS_MS",
    "BrokerMetrics",
    "Histogram",
    "MetricsCollector",
    "TopicStats",
    "counter",
    "gauge",
    "make_registry",
    "render",
    "timed_ms",
]

#: bucket bounds (ms) of the time histograms: 0.1 ms to 30 s
TIME_BUCKETS_MS: tuple[float, ...] = (
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0,
)
#: the quantiles exported for a histogram, as the JMX exporter exports Kafka's histograms
QUANTILES = (0.5, 0.75, 0.95, 0.98, 0.99, 0.999)
#: the request-metrics key of a follower's Fetch (Kafka counts FetchConsumer and FetchFollower apart)
FETCH_FOLLOWER = 1001


class Histogram:
    """Counts of observations (ms) per bucket, and their sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...] = TIME_BUCKETS_MS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above the highest bound
        self.sum = 0.0

    def copy(self) -> Histogram:
        h = Histogram(self.bounds)
        h.counts = list(self.counts)
        h.sum = self.sum
        return h

    def observe(self, ms: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, ms)] += 1
        self.sum += ms

    @property
    def count(self) -> int:
        return sum(self.counts)

    def quantile(self, q: float) -> float:
        """The ``q`` quantile, interpolated linearly within its bucket (0 with no observation)."""
        total = self.count
        if total == 0:
            return 0.0
        rank = q * total
        seen = 0
        lower = 0.0
        for i, n in enumerate(self.counts):
            upper = self.bounds[i] if i < len(self.bounds) else self.bounds[-1]
            if n and seen + n >= rank:
                return lower + (upper - lower) * (rank - seen) / n
            seen += n
            lower = upper
        return self.bounds[-1]


class TopicStats:
    """One topic's broker topic metrics (Kafka's BrokerTopicMetrics), counted per batch."""

    __slots__ = (
        "bytes_in",
        "bytes_out",
        "failed_fetch",
        "failed_produce",
        "fetch_requests",
        "messages_in",
        "produce_requests",
        "rejected_bytes",
    )

    def __init__(self) -> None:
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.rejected_bytes = 0
        self.failed_produce = 0
        self.failed_fetch = 0
        self.produce_requests = 0
        self.fetch_requests = 0

    def copy(self) -> TopicStats:
        stats = TopicStats()
        for attr in TopicStats.__slots__:
            setattr(stats, attr, getattr(self, attr))
        return stats


class BrokerMetrics:
    """The counters the broker updates while it works (one instance per broker)."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicStats] = {}
        #: request key * 1000 + version -> requests; the key is the API key, FETCH_FOLLOWER for
        #: followers' Fetch
        self.requests: dict[int, int] = {}
        #: (API key, error code) -> failed partitions of Produce and Fetch
        self.errors: dict[tuple[int, int], int] = {}
        #: (API key, error code) -> responses whose top-level error code is that (never 0)
        self.response_errors: dict[tuple[int, int], int] = {}
        #: request key -> total time (ms), from handling to the response handed to the socket
        self.request_time: dict[int, Histogram] = {}
        #: request key -> throttle time (ms) given by client quotas, and the throttled responses
        #: (Produce and Fetch exported from the start, at 0)
        self.throttle_ms: dict[int, float] = {0: 0.0, 1: 0.0}
        self.throttled: dict[int, int] = {0: 0, 1: 0}
        #: per listener
        self.connections_created: dict[str, int] = {}
        self.connections_closed: dict[str, int] = {}
        self.auth_successes: dict[str, int] = {}
        self.auth_failures: dict[str, int] = {}
        #: bytes of records sent to followers (not counted in BytesOut, as in Kafka)
        self.replication_bytes_out = 0
        # replica manager and controller
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.leader_elections = 0
        self.unclean_elections = 0
        self.leader_election_time = Histogram()
        # log
        self.flush_time = Histogram()
        # group coordinator
        self.offset_commits = 0

    def snapshot(self) -> BrokerMetrics:
        """A copy to render from another thread while this one keeps counting (cheap: dicts are
        copied in C; one small object per topic)."""
        copy = BrokerMetrics.__new__(BrokerMetrics)
        for attr, value in self.__dict__.items():
            if isinstance(value, dict):
                value = dict(value)
            elif isinstance(value, Histogram):
                value = value.copy()
            setattr(copy, attr, value)
        copy.topics = {name: stats.copy() for name, stats in self.topics.items()}
        copy.request_time = {key: h.copy() for key, h in self.request_time.items()}
        return copy

    def add_listener(self, name: str) -> None:
        """Export a listener's connection counters from the start, at 0."""
        for table in (self.connections_created, self.connections_closed, self.auth_successes, self.auth_failures):
            table.setdefault(name, 0)

    def topic(self, name: str) -> TopicStats:
        stats = self.topics.get(name)
        if stats is None:
            stats = self.topics[name] = TopicStats()
        return stats

    def request_done(self, key: int, version: int, ms: float) -> None:
        """One request answered after ``ms`` (the hottest method here: one int-keyed dict
        update and a bucket increment)."""
        rk = key * 1000 + version
        requests = self.requests
        requests[rk] = requests.get(rk, 0) + 1
        hist = self.request_time.get(key)
        if hist is None:
            hist = self.request_time[key] = Histogram()
        hist.counts[bisect.bisect_left(hist.bounds, ms)] += 1
        hist.sum += ms

    def error(self, api_key: int, code: int, n: int = 1) -> None:
        """``n`` partitions (or a response) of an ``api_key`` request failed with ``code``."""
        ek = (api_key, code)
        self.errors[ek] = self.errors.get(ek, 0) + n

    def response_error(self, api_key: int, code: int) -> None:
        """A response whose top-level error code is ``code`` (not 0: responses without an error
        are the requests counted less these)."""
        ek = (api_key, code)
        self.response_errors[ek] = self.response_errors.get(ek, 0) + 1

    def errors_by_code(self) -> dict[tuple[int, int], int]:
        """(API key, error code) -> count, NONE (0) included: responses without a top-level error."""
        out: dict[tuple[int, int], int] = {}
        for rk, n in self.requests.items():
            key = rk // 1000
            api = 1 if key == FETCH_FOLLOWER else key
            out[(api, 0)] = out.get((api, 0), 0) + n
        for (api, code), n in self.response_errors.items():
            out[(api, 0)] = out.get((api, 0), 0) - n
            out[(api, code)] = out.get((api, code), 0) + n
        for ek, n in self.errors.items():
            out[ek] = out.get(ek, 0) + n
        return out

    def count(self, table: dict[str, int], key: str, n: int = 1) -> None:
        table[key] = table.get(key, 0) + n

    def throttle(self, key: int, ms: float) -> None:
        self.throttle_ms[key] = self.throttle_ms.get(key, 0.0) + ms
        self.throttled[key] = self.throttled.get(key, 0) + 1


def timed_ms(fn: Callable[[], object]) -> float:
    """Call ``fn`` (on a worker thread: a flush); the milliseconds it took."""
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000.0


# -- export ------------------------------------------------------------------------------------------


def counter(name: str, doc: str, samples: Iterable[tuple[dict[str, str], float]]) -> Metric:
    """A counter family (``name`` without ``_total``) whose samples may have different label sets
    (Kafka exports a topic's meter and the broker-wide one under the same name)."""
    from prometheus_client.metrics_core import Metric

    family = Metric(name, doc, "counter")
    for labels, value in samples:
        family.add_sample(name + "_total", labels, value)
    return family


def gauge(name: str, doc: str, samples: Iterable[tuple[dict[str, str], float]]) -> Metric:
    from prometheus_client.metrics_core import Metric

    family = Metric(name, doc, "gauge")
    for labels, value in samples:
        family.add_sample(name, labels, value)
    return family


def _summary(name: str, doc: str, hists: Iterable[tuple[dict[str, str], Histogram]]) -> Metric:
    """Kafka's Yammer histogram as the JMX exporter shows it: quantiles, ``_count`` (and ``_sum``)."""
    from prometheus_client.metrics_core import Metric

    family = Metric(name, doc, "summary")
    for labels, h in hists:
        for q in QUANTILES:
            family.add_sample(name, {**labels, "quantile": str(q)}, h.quantile(q))
        family.add_sample(name + "_count", labels, h.count)
        family.add_sample(name + "_sum", labels, h.sum)
    return family


def _histogram_seconds(name: str, doc: str, hists: Iterable[tuple[dict[str, str], Histogram]]) -> Metric:
    from prometheus_client.metrics_core import Metric

    family = Metric(name, doc, "histogram")
    for labels, h in hists:
        running = 0
        for bound, n in zip((*h.bounds, float("inf")), h.counts):
            running += n
            le = "+Inf" if bound == float("inf") else repr(bound / 1000.0)
            family.add_sample(name + "_bucket", {**labels, "le": le}, running)
        family.add_sample(name + "_count", labels, running)
        family.add_sample(name + "_sum", labels, h.sum / 1000.0)
    return family


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class MetricsCollector:
    """The counters of a :class:`BrokerMetrics` as metric families (a prometheus_client
    collector); ``request_name(key)`` and ``api_name(api_key)`` give Kafka's request names
    (``Produce``, ``FetchConsumer``...).  ``metrics`` is the counters, or what gives the
    snapshot to render (see :meth:`BrokerMetrics.snapshot`)."""

    def __init__(
        self,
        metrics: BrokerMetrics | Callable[[], BrokerMetrics],
        request_name: Callable[[int], str],
        api_name: Callable[[int], str],
    ) -> None:
        self.metrics = metrics
        self.request_name = request_name
        self.api_name = api_name

    def collect(self) -> Iterator[Metric]:
        m = self.metrics if isinstance(self.metrics, BrokerMetrics) else self.metrics()
        topics = sorted(m.topics.items())
        for attr, name, doc in _TOPIC_METERS:
            samples: list[tuple[dict[str, str], float]] = [({}, sum(getattr(s, attr) for _t, s in topics))]
            samples += [({"topic": t}, getattr(s, attr)) for t, s in topics]
            yield counter(name, doc, samples)
        yield counter("kafka_server_brokertopicmetrics_replicationbytesout", "Bytes of records sent to followers",
                      [({}, m.replication_bytes_out)])
        rname = self.request_name
        yield counter(
            "kafka_network_requestmetrics_requests",
            "Requests answered, by request name and version (Kafka's RequestsPerSec)",
            (({"request": rname(rk // 1000), "version": str(rk % 1000)}, n) for rk, n in sorted(m.requests.items())),
        )
        yield counter(
            "kafka_network_requestmetrics_errors",
            "Responses by request and error code name, NONE included (Kafka's ErrorsPerSec; Produce and "
            "Fetch also count each failed partition)",
            (({"request": self.api_name(k), "error": _error_name(c)}, n)
             for (k, c), n in sorted(m.errors_by_code().items())),
        )
        hists = [({"request": rname(k)}, h) for k, h in sorted(m.request_time.items())]
        yield _summary(
            "kafka_network_requestmetrics_totaltimems",
            "Time (ms) from handling a request to handing its response to the socket (Kafka's TotalTimeMs)",
            hists,
        )
        yield _histogram_seconds(
            "odradek_request_total_time_seconds", "Request total time as a Prometheus histogram (seconds)", hists
        )
        yield counter(
            "odradek_quota_throttle_time_ms",
            "Throttle time (ms) client quotas gave responses, by request",
            (({"request": rname(k)}, v) for k, v in sorted(m.throttle_ms.items())),
        )
        yield counter(
            "odradek_quota_throttled_responses",
            "Responses that carried a throttle time, by request",
            (({"request": rname(k)}, v) for k, v in sorted(m.throttled.items())),
        )
        for table, name, doc in (
            (m.connections_created, "kafka_server_socket_server_metrics_connection_creation",
             "Connections accepted, per listener"),
            (m.connections_closed, "kafka_server_socket_server_metrics_connection_close",
             "Connections closed, per listener"),
            (m.auth_successes, "kafka_server_socket_server_metrics_successful_authentication",
             "Successful SASL authentications, per listener"),
            (m.auth_failures, "kafka_server_socket_server_metrics_failed_authentication",
             "Failed authentications (SASL, TLS handshake), per listener"),
        ):
            yield counter(name, doc, (({"listener": k}, v) for k, v in sorted(table.items())))
        yield counter("kafka_server_replicamanager_isrshrinks", "ISR shrinks of partitions this broker leads",
                      [({}, m.isr_shrinks)])
        yield counter("kafka_server_replicamanager_isrexpands", "ISR expansions of partitions this broker leads",
                      [({}, m.isr_expands)])
        yield counter("kafka_controller_controllerstats_uncleanleaderelections",
                      "Unclean leader elections made by this broker as controller", [({}, m.unclean_elections)])
        yield _summary("kafka_controller_controllerstats_leaderelectionrateandtimems",
                       "Leader elections made by this broker as controller, and their time (ms)",
                       [({}, m.leader_election_time)])
        yield _summary("kafka_log_logflushstats_logflushrateandtimems", "Log flushes (fsync) and their time (ms)",
                       [({}, m.flush_time)])
        yield counter("kafka_server_group_coordinator_metrics_offset_commit",
                      "Offsets committed to groups this broker coordinates", [({}, m.offset_commits)])


_TOPIC_METERS = (
    ("messages_in", "kafka_server_brokertopicmetrics_messagesin", "Records appended by producers"),
    ("bytes_in", "kafka_server_brokertopicmetrics_bytesin", "Bytes of record batches appended by producers"),
    ("bytes_out", "kafka_server_brokertopicmetrics_bytesout", "Bytes of records sent to consumers and followers"),
    ("rejected_bytes", "kafka_server_brokertopicmetrics_bytesrejected", "Bytes of batches refused"),
    ("failed_produce", "kafka_server_brokertopicmetrics_failedproducerequests", "Partitions of produce requests that failed"),
    ("failed_fetch", "kafka_server_brokertopicmetrics_failedfetchrequests", "Partitions of fetch requests that failed"),
    ("produce_requests", "kafka_server_brokertopicmetrics_totalproducerequests", "Partitions of produce requests"),
    ("fetch_requests", "kafka_server_brokertopicmetrics_totalfetchrequests", "Partitions of fetch requests"),
)


class _Extra:
    def __init__(self, fn: Callable[[], Iterable[Metric]]) -> None:
        self.fn = fn

    def collect(self) -> Iterable[Metric]:
        return list(self.fn())


def make_registry(
    collector: MetricsCollector, extra: Iterable[Callable[[], Iterable[Metric]]] = (), *, process: bool = True
) -> CollectorRegistry:
    """A registry of the broker's counters, of collectors computed at scrape time (``extra``) and
    (``process``) of the process: CPU, RSS, open descriptors, GC, Python version."""
    from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)  # a collector by its collect() method
    for fn in extra:
        registry.register(_Extra(fn))
    if process:
        ProcessCollector(registry=registry)
        GCCollector(registry=registry)
        PlatformCollector(registry=registry)
    return registry


def render(registry: CollectorRegistry) -> tuple[bytes, str]:
    """The registry in Prometheus' text format, and its content type."""
    from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

    return generate_latest(registry), CONTENT_TYPE_LATEST

