"""``/metrics``: the broker's Prometheus endpoint, and the gauges it computes at scrape time.

The counters kept while requests are handled live in :class:`odradek.metrics.BrokerMetrics`;
what is state — partitions and leaders, under-replicated and under-min-ISR partitions, log
sizes and offsets, groups by state, consumer lag, connections — is read from the broker's
services when Prometheus scrapes, never maintained on the hot path.

The HTTP listener is an asyncio server on the broker's own event loop (``metrics.host``,
``metrics.port``).  A scrape copies the counters and the state it shows on the loop — the thread
that changes them, so nothing needs a lock and nothing is read half-updated — as plain numbers
and tuples, then builds the metric families and the text on a worker thread, which the loop
shares through the GIL's 1 ms switch interval rather than waiting for it.  The listener answers
one request per connection (``Connection: close``) and serves only ``GET /metrics`` (and ``/``
with a link).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
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

__all__ = ["BrokerRegistry", "BrokerState", "MetricsServer", "api_name", "request_name", "state_families", "take_state"]

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


@dataclass(slots=True)
class BrokerState:
    """What the gauges show, copied from the broker's structures on the event loop (plain
    numbers and tuples: turned into metric families on another thread)."""

    #: (topic, partition, size in bytes or None when closed, segments or None, log start, log end)
    logs: list[tuple[str, int, int | None, int | None, int, int]] = field(default_factory=list)
    hw: dict[tuple[str, int], int] = field(default_factory=dict)
    partitions: int = 0
    leaders: int = 0
    under_replicated: int = 0
    under_min_isr: int = 0
    at_min_isr: int = 0
    offline_replicas: int = 0
    active_controller: bool = False
    offline_partitions: int = 0
    global_partitions: int = 0
    global_topics: int = 0
    live_brokers: int = 0
    stopping: bool = False
    #: (group id, state, members, [(topic, partition, committed offset)])
    groups: list[tuple[str, GroupState, int, list[tuple[str, int, int]]]] = field(default_factory=list)
    completed_rebalances: int = 0
    connections: dict[str, int] = field(default_factory=dict)


def take_state(services: Services, connections: Callable[[], Iterable[Any]], listeners: Iterable[str]) -> BrokerState:
    """Copy what the gauges show from the broker (on the event loop: no locks needed)."""
    svc = services
    st = BrokerState()
    broker_id = svc.broker_id
    failures = svc.replicas.log_dirs
    partitions = list(svc.replicas.partitions.values())
    st.partitions = len(partitions)
    logs = st.logs
    hw = st.hw
    for p in partitions:
        lg = p.log
        if failures.offline(p.log_dir):
            st.offline_replicas += 1
            continue
        hw[(p.topic, p.index)] = lg.high_watermark
        if lg.closed:
            logs.append((p.topic, p.index, None, None, lg.log_start_offset, lg.log_end_offset))
        else:
            segs = lg.segments
            size = 0
            for seg in segs:
                size += seg.size
            logs.append((p.topic, p.index, size, len(segs), lg.log_start_offset, lg.log_end_offset))
        state = p.state
        if state.leader != broker_id:
            continue
        st.leaders += 1
        isr = len(state.isr)
        if isr < len(state.replicas):
            st.under_replicated += 1
        min_isr = lg.config.min_insync_replicas
        if isr < min_isr:
            st.under_min_isr += 1
        elif isr == min_isr:
            st.at_min_isr += 1
    # the controller (the single node is always its own)
    st.active_controller = bool(getattr(svc.controller, "active", False))
    if st.active_controller:
        image = svc.image
        st.global_topics = len(image.topics)
        st.live_brokers = len(image.brokers)
        for t in image.topics.values():
            for ps in t.partitions.values():
                st.global_partitions += 1
                if ps.leader < 0:
                    st.offline_partitions += 1
    st.stopping = svc.stopping
    coordinator = svc.coordinator
    if coordinator is not None:
        st.completed_rebalances = coordinator.completed_rebalances
        for g in coordinator.all_groups():
            offsets = [(t, i, om.offset) for (t, i), om in g.offsets.items()]
            st.groups.append((g.group_id, g.state, len(g.members), offsets))
    counts = dict.fromkeys(listeners, 0)
    for conn in list(connections()):
        name = getattr(conn, "listener", "?")
        counts[name] = counts.get(name, 0) + 1
    st.connections = counts
    return st


def state_families(st: BrokerState) -> Iterator[Metric]:
    """The gauges of a :class:`BrokerState`: replica manager, controller, log, groups, consumer
    lag, connections."""
    rm = "kafka_server_replicamanager_"
    yield gauge(rm + "partitioncount", "Partitions hosted by this broker", [({}, st.partitions)])
    yield gauge(rm + "leadercount", "Partitions this broker leads", [({}, st.leaders)])
    yield gauge(rm + "underreplicatedpartitions", "Partitions led here whose ISR is smaller than their replicas",
                [({}, st.under_replicated)])
    yield gauge(rm + "underminisrpartitioncount", "Partitions led here whose ISR is below min.insync.replicas",
                [({}, st.under_min_isr)])
    yield gauge(rm + "atminisrpartitioncount", "Partitions led here whose ISR is exactly min.insync.replicas",
                [({}, st.at_min_isr)])
    yield gauge(rm + "offlinereplicacount", "Replicas hosted here whose log dir is offline", [({}, st.offline_replicas)])
    labels = [{"topic": t, "partition": str(i)} for t, i, *_rest in st.logs]
    yield gauge("kafka_log_log_size", "Bytes of a partition's log segments",
                [(lb, row[2]) for lb, row in zip(labels, st.logs) if row[2] is not None])
    yield gauge("kafka_log_log_logstartoffset", "A partition's log start offset",
                [(lb, row[4]) for lb, row in zip(labels, st.logs)])
    yield gauge("kafka_log_log_logendoffset", "A partition's log end offset",
                [(lb, row[5]) for lb, row in zip(labels, st.logs)])
    yield gauge("kafka_log_log_numlogsegments", "A partition's number of log segments",
                [(lb, row[3]) for lb, row in zip(labels, st.logs) if row[3] is not None])

    kc = "kafka_controller_kafkacontroller_"
    yield gauge(kc + "activecontrollercount", "1 on the active controller, else 0", [({}, int(st.active_controller))])
    yield gauge(kc + "offlinepartitionscount", "Partitions without a leader (reported by the active controller)",
                [({}, st.offline_partitions)])
    yield gauge(kc + "globalpartitioncount", "Partitions in the cluster (reported by the active controller)",
                [({}, st.global_partitions)])
    yield gauge(kc + "globaltopiccount", "Topics in the cluster (reported by the active controller)",
                [({}, st.global_topics)])
    yield gauge(kc + "activebrokercount", "Live brokers (reported by the active controller)", [({}, st.live_brokers)])
    yield gauge("kafka_server_kafkaserver_brokerstate", "The broker's state (3: running, 6: shutting down)",
                [({}, 6 if st.stopping else 3)])

    # the group coordinator, and the lag of the groups it coordinates
    gm = "kafka_coordinator_group_groupmetadatamanager_"
    by_state: dict[GroupState, int] = {}
    n_offsets = 0
    lag: list[tuple[dict[str, str], float]] = []
    current: list[tuple[dict[str, str], float]] = []
    lag_sum: dict[tuple[str, str], int] = {}
    members: list[tuple[dict[str, str], float]] = []
    for group_id, state, n_members, offsets in st.groups:
        by_state[state] = by_state.get(state, 0) + 1
        n_offsets += len(offsets)
        if state is GroupState.DEAD:
            continue
        members.append(({"consumergroup": group_id}, n_members))
        for topic, index, committed in sorted(offsets):
            lb = {"consumergroup": group_id, "topic": topic, "partition": str(index)}
            current.append((lb, committed))
            end = st.hw.get((topic, index))
            if end is None:  # the partition is not hosted here: its high watermark is unknown
                continue
            behind = max(end - committed, 0)
            lag.append((lb, behind))
            key = (group_id, topic)
            lag_sum[key] = lag_sum.get(key, 0) + behind
    yield gauge(gm + "numgroups", "Groups this broker coordinates", [({}, len(st.groups))])
    for state, suffix in _GROUP_STATE_GAUGES:
        yield gauge(gm + suffix, f"Groups in state {state.value}", [({}, by_state.get(state, 0))])
    yield gauge(gm + "numoffsets", "Committed offsets of the groups this broker coordinates", [({}, n_offsets)])
    yield counter(
        "kafka_server_group_coordinator_metrics_group_completed_rebalance",
        "Rebalances completed by groups this broker coordinates", [({}, st.completed_rebalances)],
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
    yield gauge("kafka_server_socket_server_metrics_connection_count", "Open connections, per listener",
                [({"listener": k}, v) for k, v in sorted(st.connections.items())])


class _Snapshots:
    """The copies the registry renders: taken on the loop by :meth:`take`, read on the render thread."""

    def __init__(
        self, metrics: BrokerMetrics, services: Services, connections: Callable[[], Iterable[Any]], listeners: list[str]
    ) -> None:
        self.metrics = metrics
        self.services = services
        self.connections = connections
        self.listeners = listeners
        self.counters = BrokerMetrics()
        self.state = BrokerState()

    def take(self) -> None:
        # a deleted topic's meters go, as Kafka removes them (and those of names that never existed)
        topics = self.services.image.topics
        counted = self.metrics.topics
        for name in [t for t in counted if t not in topics]:
            del counted[name]
        self.counters = self.metrics.snapshot()
        self.state = take_state(self.services, self.connections, self.listeners)


class BrokerRegistry:
    """What ``/metrics`` renders: snapshots of the counters and the broker's state (taken on the
    loop by :meth:`snapshot`), and the process; :meth:`render` may run on another thread."""

    def __init__(
        self, metrics: BrokerMetrics, services: Services, connections: Callable[[], Iterable[Any]], listeners: list[str]
    ) -> None:
        self._snapshots = _Snapshots(metrics, services, connections, listeners)
        self._registry: CollectorRegistry | None = None

    def snapshot(self) -> None:
        self._snapshots.take()

    def render(self) -> tuple[bytes, str]:
        if self._registry is None:  # prometheus_client is imported here, at the first scrape
            snaps = self._snapshots
            self._registry = make_registry(
                MetricsCollector(lambda: snaps.counters, request_name, api_name),
                [lambda: state_families(snaps.state)],
            )
        return render(self._registry)


class MetricsServer:
    """``GET /metrics`` on an asyncio listener of the broker's loop: the registry's snapshot is
    taken on the loop, the text rendered on a worker thread (one scrape at a time)."""

    def __init__(self, registry: BrokerRegistry) -> None:
        self.registry = registry
        self._server: asyncio.AbstractServer | None = None
        self._scraping = asyncio.Lock()
        self.address: tuple[str, int] = ("", 0)

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
                    async with self._scraping:
                        self.registry.snapshot()
                        body, ctype = await asyncio.get_running_loop().run_in_executor(None, self.registry.render)
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
