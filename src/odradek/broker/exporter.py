"""``/metrics``: the broker's Prometheus endpoint, and the gauges it computes at scrape time.

The counters kept while requests are handled live in :class:`odradek.metrics.BrokerMetrics`;
what is state — partitions and leaders, under-replicated and under-min-ISR partitions, log
sizes and offsets, groups by state, consumer lag, connections — is read from the broker's
services when Prometheus scrapes, never maintained on the hot path.

The HTTP listener is an asyncio server on the broker's own event loop (``metrics.host``,
``metrics.port``): a scrape reads the broker's structures on the thread that changes them, so
nothing needs a lock and nothing is read half-updated.  A scrape costs the loop the time to
render the families (about a millisecond per thousand partitions); the listener answers one
request per connection (HTTP/1.0 style, ``Connection: close``) and serves only ``GET /metrics``
(and ``/`` with a link to it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from odradek._timeouts import wait_for
from odradek.cluster.group import GroupState
from odradek.metrics import (
    FETCH_FOLLOWER,
    BrokerMetrics,
    MetricsCollector,
    counter,
    gauge,
    make_registry,
    render,
)
from odradek.protocol import ApiKey

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import CollectorRegistry

    from odradek.broker.services import Services

__all__ = ["MetricsServer", "api_name", "broker_registry", "request_name", "state_metrics"]

log = logging.getLogger(__name__)

def api_name(key: int) -> str:
    """Kafka's name of an API (``Produce``, ``FindCoordinator``, ``ApiVersions``...)."""
    try:
        name = ApiKey(key).name
    except ValueError:
        return str(key)
    return "".join(part.capitalize() for part in name.split("_"))


def request_name(key: int) -> str:
    """The request name of Kafka's RequestMetrics: Fetch is FetchConsumer or FetchFollower."""
    if key == ApiKey.FETCH:
        return "FetchConsumer"
    if key == FETCH_FOLLOWER:
        return "FetchFollower"
    return api_name(key)


_GROUP_STATE_GAUGES = (
    (GroupState.PREPARING_REBALANCE, "numgroupspreparingrebalance"),
    (GroupState.COMPLETING_REBALANCE, "numgroupscompletingrebalance"),
    (GroupState.STABLE, "numgroupsstable"),
    (GroupState.EMPTY, "numgroupsempty"),
    (GroupState.DEAD, "numgroupsdead"),
)


def state_metrics(
    services: Services, connections: Callable[[], Iterable[Any]], listeners: Iterable[str]
) -> Iterator[Metric]:
    """The gauges read from the broker's state: replica manager, controller, log, groups, consumer
    lag, connections.  ``connections()`` gives the open connections (each with ``listener``)."""
    svc = services
    broker_id = svc.broker_id
    failures = svc.replicas.log_dirs
    partitions = list(svc.replicas.partitions.values())
    leaders = under = under_min = at_min = offline = 0
    hw: dict[tuple[str, int], int] = {}
    sizes: list[tuple[dict[str, str], float]] = []
    starts: list[tuple[dict[str, str], float]] = []
    ends: list[tuple[dict[str, str], float]] = []
    segments: list[tuple[dict[str, str], float]] = []
    for p in partitions:
        lg = p.log
        if failures.any_failed and failures.offline(p.log_dir):
            offline += 1
            continue
        hw[(p.topic, p.index)] = lg.high_watermark
        labels = {"topic": p.topic, "partition": str(p.index)}
        if not lg.closed:
            segs = lg.segments
            sizes.append((labels, sum(s.size for s in segs)))
            segments.append((labels, len(segs)))
        starts.append((labels, lg.log_start_offset))
        ends.append((labels, lg.log_end_offset))
        if p.state.leader != broker_id:
            continue
        leaders += 1
        isr = len(p.state.isr)
        if isr < len(p.state.replicas):
            under += 1
        min_isr = lg.config.min_insync_replicas
        if isr < min_isr:
            under_min += 1
        elif isr == min_isr:
            at_min += 1
    rm = "kafka_server_replicamanager_"
    yield gauge(rm + "partitioncount", "Partitions hosted by this broker", [({}, len(partitions))])
    yield gauge(rm + "leadercount", "Partitions this broker leads", [({}, leaders)])
    yield gauge(rm + "underreplicatedpartitions", "Partitions led here whose ISR is smaller than their replicas",
                [({}, under)])
    yield gauge(rm + "underminisrpartitioncount", "Partitions led here whose ISR is below min.insync.replicas",
                [({}, under_min)])
    yield gauge(rm + "atminisrpartitioncount", "Partitions led here whose ISR is exactly min.insync.replicas",
                [({}, at_min)])
    yield gauge(rm + "offlinereplicacount", "Replicas hosted here whose log dir is offline", [({}, offline)])
    yield gauge("kafka_log_log_size", "Bytes of a partition's log segments", sizes)
    yield gauge("kafka_log_log_logstartoffset", "A partition's log start offset", starts)
    yield gauge("kafka_log_log_logendoffset", "A partition's log end offset", ends)
    yield gauge("kafka_log_log_numlogsegments", "A partition's number of log segments", segments)

    # the controller (the single node is always its own)
    controller = svc.controller
    active = bool(getattr(controller, "active", False))
    image = svc.image
    offline_partitions = total_partitions = 0
    if active:
        for t in image.topics.values():
            for st in t.partitions.values():
                total_partitions += 1
                if st.leader < 0:
                    offline_partitions += 1
    kc = "kafka_controller_kafkacontroller_"
    yield gauge(kc + "activecontrollercount", "1 on the active controller, else 0", [({}, int(active))])
    yield gauge(kc + "offlinepartitionscount", "Partitions without a leader (reported by the active controller)",
                [({}, offline_partitions)])
    yield gauge(kc + "globalpartitioncount", "Partitions in the cluster (reported by the active controller)",
                [({}, total_partitions)])
    yield gauge(kc + "globaltopiccount", "Topics in the cluster (reported by the active controller)",
                [({}, len(image.topics) if active else 0)])
    yield gauge(kc + "activebrokercount", "Live brokers (reported by the active controller)",
                [({}, len(image.brokers) if active else 0)])
    yield gauge("kafka_server_kafkaserver_brokerstate", "The broker's state (3: running, 6: shutting down)",
                [({}, 6 if svc.stopping else 3)])

    # the group coordinator, and the lag of the groups it coordinates
    coordinator = svc.coordinator
    gm = "kafka_coordinator_group_groupmetadatamanager_"
    groups = list(coordinator.state.groups.values()) if coordinator is not None else []
    by_state: dict[GroupState, int] = {}
    n_offsets = 0
    lag: list[tuple[dict[str, str], float]] = []
    current: list[tuple[dict[str, str], float]] = []
    lag_sum: dict[tuple[str, str], int] = {}
    members: list[tuple[dict[str, str], float]] = []
    for g in groups:
        by_state[g.state] = by_state.get(g.state, 0) + 1
        n_offsets += len(g.offsets)
        if g.state is GroupState.DEAD:
            continue
        members.append(({"consumergroup": g.group_id}, len(g.members)))
        for (topic, index), om in list(g.offsets.items()):
            labels = {"consumergroup": g.group_id, "topic": topic, "partition": str(index)}
            current.append((labels, om.offset))
            end = hw.get((topic, index))
            if end is None:  # the partition is not hosted here: its high watermark is unknown
                continue
            behind = max(end - om.offset, 0)
            lag.append((labels, behind))
            key = (g.group_id, topic)
            lag_sum[key] = lag_sum.get(key, 0) + behind
    yield gauge(gm + "numgroups", "Groups this broker coordinates", [({}, len(groups))])
    for state, suffix in _GROUP_STATE_GAUGES:
        yield gauge(gm + suffix, f"Groups in state {state.value}", [({}, by_state.get(state, 0))])
    yield gauge(gm + "numoffsets", "Committed offsets of the groups this broker coordinates", [({}, n_offsets)])
    rebalances = coordinator.state.completed_rebalances if coordinator is not None else 0
    yield _one_counter(
        "kafka_server_group_coordinator_metrics_group_completed_rebalance",
        "Rebalances completed by groups this broker coordinates", rebalances,
    )
    yield gauge("kafka_consumergroup_current_offset", "A group's committed offset of a partition", current)
    yield gauge(
        "kafka_consumergroup_lag",
        "A group's lag on a partition: high watermark - committed offset (partitions hosted by the coordinator)",
        lag,
    )
    yield gauge("kafka_consumergroup_lag_sum", "A group's lag summed over a topic's partitions",
                [({"consumergroup": g, "topic": t}, v) for (g, t), v in sorted(lag_sum.items())])
    yield gauge("kafka_consumergroup_members", "Members of a group", members)

    # connections
    counts = dict.fromkeys(listeners, 0)
    for conn in list(connections()):
        name = getattr(conn, "listener", "?")
        counts[name] = counts.get(name, 0) + 1
    yield gauge("kafka_server_socket_server_metrics_connection_count", "Open connections, per listener",
                [({"listener": k}, v) for k, v in sorted(counts.items())])


def _one_counter(name: str, doc: str, value: float) -> Metric:
    return counter(name, doc, [({}, value)])


def broker_registry(
    metrics: BrokerMetrics, services: Services, connections: Callable[[], Iterable[Any]], listeners: list[str]
) -> Callable[[], CollectorRegistry]:
    """What makes the registry ``/metrics`` renders: the counters, the broker's state, the process."""
    return lambda: make_registry(
        MetricsCollector(metrics, request_name, api_name),
        [lambda: state_metrics(services, connections, listeners)],
    )


class MetricsServer:
    """``GET /metrics`` on an asyncio listener of the broker's loop.  The registry is made by
    ``registry_factory`` at the first scrape (prometheus_client is imported then, or by
    :meth:`warm_up` on a worker thread after start-up: not on the broker's start-up path)."""

    def __init__(self, registry_factory: Callable[[], CollectorRegistry]) -> None:
        self.registry_factory = registry_factory
        self.registry: CollectorRegistry | None = None
        self._server: asyncio.AbstractServer | None = None
        self.address: tuple[str, int] = ("", 0)

    async def warm_up(self, delay: float = 1.0) -> None:
        """Import prometheus_client on a worker thread ``delay`` s after start-up (the broker is
        ready by then), so that the first scrape does not import it on the loop."""
        import importlib

        await asyncio.sleep(delay)
        with contextlib.suppress(Exception):
            await asyncio.get_running_loop().run_in_executor(
                None, importlib.import_module, "prometheus_client.exposition"
            )

    @property
    def url(self) -> str:
        host, port = self.address
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{port}/metrics"

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._serve, host, port, reuse_address=True)
        name = self._server.sockets[0].getsockname()
        self.address = (name[0], name[1])

    def close(self) -> None:
        if self._server is not None:
            self._server.close()

    async def wait_closed(self) -> None:
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await _read_head(reader)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, TimeoutError):
                return
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            parts = line.split()
            method, path = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
            path = path.split("?", 1)[0]
            if method not in ("GET", "HEAD"):
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"only GET\n"
            elif path == "/metrics":
                try:
                    if self.registry is None:
                        self.registry = self.registry_factory()
                    body, ctype = render(self.registry)
                    status = "200 OK"
                except Exception:
                    log.exception("rendering /metrics failed")
                    status, ctype, body = "500 Internal Server Error", "text/plain", b"metrics failed\n"
            elif path == "/":
                status, ctype = "200 OK", "text/html"
                body = b'<html><body><a href="/metrics">/metrics</a></body></html>\n'
            else:
                status, ctype, body = "404 Not Found", "text/plain", b"not found: try /metrics\n"
            header = (
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n"
            ).encode()
            writer.write(header if method == "HEAD" else header + body)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        finally:
            writer.close()


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    """The request line and headers (at most 64 KiB, within 10 s)."""
    return await wait_for(reader.readuntil(b"\r\n\r\n"), 10)
