"""The registry's metrics on the broker's ``/metrics``: requests by endpoint, method and status,
their latency, and the schemas and subjects it holds.

Counted per request on the event loop (plain dictionaries); :meth:`RegistryMetrics.families`
copies them into metric families when Prometheus scrapes.  The names follow Confluent's JMX
metrics as the Prometheus JMX exporter shows them (``kafka_schema_registry_...``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from odradek.metrics import Histogram, counter, gauge

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["RegistryMetrics"]

_PREFIX = "kafka_schema_registry_"


class RegistryMetrics:
    def __init__(self) -> None:
        #: (endpoint, method, status) -> requests
        self.requests: dict[tuple[str, str, int], int] = {}
        #: endpoint -> latency (ms)
        self.latency: dict[str, Histogram] = {}
        self.forwarded = 0
        self.auth_failures = 0
        #: (schemas, subjects, is writer) now, read at scrape time
        self.gauges: Callable[[], tuple[int, int, bool]] = lambda: (0, 0, False)

    def done(self, endpoint: str, method: str, status: int, ms: float) -> None:
        key = (endpoint, method, status)
        self.requests[key] = self.requests.get(key, 0) + 1
        hist = self.latency.get(endpoint)
        if hist is None:
            hist = self.latency[endpoint] = Histogram()
        hist.observe(ms)

    def families(self) -> list[Metric]:
        """The families as of now (called on the event loop: the numbers are copied)."""
        return list(self._families())

    def _families(self) -> Iterator[Metric]:
        schemas, subjects, writer = self.gauges()
        yield counter(_PREFIX + "requests", "Schema registry requests answered, by endpoint, method and HTTP status",
                      [({"endpoint": e, "method": m, "status": str(s)}, n)
                       for (e, m, s), n in sorted(self.requests.items())])
        from prometheus_client.metrics_core import Metric

        family = Metric(_PREFIX + "request_latency_seconds", "Schema registry request latency, by endpoint", "histogram")
        for endpoint, h in sorted(self.latency.items()):
            running = 0
            for bound, n in zip((*h.bounds, float("inf")), h.counts):
                running += n
                le = "+Inf" if bound == float("inf") else repr(bound / 1000.0)
                family.add_sample(family.name + "_bucket", {"endpoint": endpoint, "le": le}, running)
            family.add_sample(family.name + "_count", {"endpoint": endpoint}, running)
            family.add_sample(family.name + "_sum", {"endpoint": endpoint}, h.sum / 1000.0)
        yield family
        yield counter(_PREFIX + "forwarded_requests", "Requests this broker forwarded to the _schemas writer",
                      [({}, self.forwarded)])
        yield counter(_PREFIX + "authentication_failures", "Failed HTTP Basic authentications", [({}, self.auth_failures)])
        yield gauge(_PREFIX + "registered_count", "Live schema versions (subject, version) in the registry",
                    [({}, schemas)])
        yield gauge(_PREFIX + "subject_count", "Subjects with a live version", [({}, subjects)])
        yield gauge(_PREFIX + "master_slave_role", "1 on the broker that writes _schemas (its leader), else 0",
                    [({}, int(writer))])
