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

Who may read it (the names of topics and groups are in it):

* the ``Host`` header must name this endpoint - the bound address, the address the request came
  in on, ``localhost`` (and ``*.localhost``), this machine's host names, with the bound port if a
  port is given - or one of ``metrics.http.allowed.hosts`` (``*``: any).  A web page cannot then
  read the endpoint through a name of its own that resolves here (DNS rebinding): 403.
* with ``metrics.http.basic.auth.user`` and ``metrics.http.basic.auth.password`` set, every
  request needs those HTTP Basic credentials (Prometheus' ``basic_auth``): 401 and a
  ``WWW-Authenticate`` challenge without them.

The request head is parsed strictly (:func:`parse_request_head`): a malformed one gets 400.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hmac
import ipaddress
import logging
import re
import socket
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from odradek import __version__
from odradek._http import MAX_HEADERS, BadHttpRequest, HttpRequest, parse_request_head
from odradek._timeouts import wait_for
from odradek.cluster.group import GroupState
from odradek.cluster.share_partition import RecordState
from odradek.config import ConfigError
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
from odradek.settings import MetricsSettings
from odradek.transport.listen import TcpServer

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import CollectorRegistry

    from odradek.broker.services import Services

__all__ = [
    "MAX_HEADERS",
    "BadHttpRequest",
    "BrokerRegistry",
    "BrokerState",
    "HttpRequest",
    "MetricsAccess",
    "MetricsServer",
    "api_name",
    "parse_request_head",
    "request_name",
    "state_families",
    "take_state",
]

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
    broker_id: int = -1
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
    #: share groups at this broker's share-partition leaders: each group's counters (group id ->
    #: name -> count, see SharePartitionManager.stats), the totals, and each share partition's
    #: in-flight records (group, topic, partition, start offset, acquired, available)
    share_groups: dict[str, dict[str, int]] = field(default_factory=dict)
    share_totals: dict[str, int] = field(default_factory=dict)
    share_partitions: list[tuple[str, str, int, int, int, int]] = field(default_factory=list)


def take_state(services: Services, connections: Callable[[], Iterable[Any]], listeners: Iterable[str]) -> BrokerState:
    """Copy what the gauges show from the broker (on the event loop: no locks needed)."""
    svc = services
    st = BrokerState()
    broker_id = svc.broker_id
    st.broker_id = broker_id
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
    st.stopping = svc.run.stopping
    coordinator = svc.coordinator
    if coordinator is not None:
        st.completed_rebalances = coordinator.completed_rebalances
        for g in coordinator.all_groups():
            offsets = [(t, i, om.offset) for (t, i), om in g.offsets.items()]
            st.groups.append((g.group_id, g.state, len(g.members), offsets))
    shares = svc.shares
    if shares is not None:
        st.share_groups = {g: dict(c) for g, c in shares.group_stats.items()}
        st.share_totals = dict(shares.stats)
        names = {t.topic_id: t.name for t in svc.image.topics.values()}
        for (group_id, topic_id, index), sp in list(shares.partitions.items()):
            c = sp.counts()
            st.share_partitions.append((group_id, names.get(topic_id, str(topic_id)), index, sp.start_offset,
                                        c[RecordState.ACQUIRED], c[RecordState.AVAILABLE]))
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
    yield gauge("kafka_server_app_info", "1, labelled with this broker's id and version (Kafka's app-info MBean)",
                [({"id": str(st.broker_id), "version": __version__}, 1)])
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
    yield from share_families(st)
    yield gauge("kafka_server_socket_server_metrics_connection_count", "Open connections, per listener",
                [({"listener": k}, v) for k, v in sorted(st.connections.items())])


#: the share-group counters (SharePartitionManager.stats) as exported: name, help
_SHARE_COUNTERS = (
    ("acquired", "records_acquired", "Records acquired by share-group members"),
    ("accepted", "records_accepted", "Records acknowledged ACCEPT"),
    ("released", "records_released", "Records released (RELEASE, or a member's session closed)"),
    ("rejected", "records_rejected", "Records acknowledged REJECT"),
    ("archived", "records_archived", "Records archived (rejected, or at the delivery-count limit)"),
    ("lock_expired", "acquisition_lock_timeout", "Times a share partition's acquisition locks expired"),
)


def share_families(st: BrokerState) -> Iterator[Metric]:
    """Share groups at this broker's share-partition leaders (Kafka's ShareGroupMetrics and
    SharePartitionMetrics): each group's counters with a ``group`` label and the broker's totals
    without one, and each share partition's in-flight records."""
    sg = "kafka_server_share_group_metrics_"
    for key, name, doc in _SHARE_COUNTERS:
        samples: list[tuple[dict[str, str], float]] = [({}, st.share_totals.get(key, 0))]
        samples += [({"group": g}, c.get(key, 0)) for g, c in sorted(st.share_groups.items())]
        yield counter(sg + name, doc, samples)
    # Kafka's own meter (kafka.server:type=ShareGroupMetrics,name=RecordAcknowledgementsPerSec,
    # ackType=...): broker-wide, and here also per group
    acks = []
    for ack_type, key in (("Accept", "accepted"), ("Release", "released"), ("Reject", "rejected")):
        acks.append(({"acktype": ack_type}, st.share_totals.get(key, 0)))
        acks += [({"group": g, "acktype": ack_type}, c.get(key, 0)) for g, c in sorted(st.share_groups.items())]
    yield counter("kafka_server_sharegroupmetrics_recordacknowledgements",
                  "Records acknowledged, per acknowledgement type", acks)
    sp = "kafka_server_share_partition_metrics_"
    rows = sorted(st.share_partitions)
    labels = [{"group": g, "topic": t, "partition": str(i)} for g, t, i, *_rest in rows]
    yield gauge(sp + "start_offset", "A share partition's start offset", [(lb, r[3]) for lb, r in zip(labels, rows)])
    yield gauge(sp + "in_flight_acquired", "A share partition's records acquired by members",
                [(lb, r[4]) for lb, r in zip(labels, rows)])
    yield gauge(sp + "in_flight_available", "A share partition's in-flight records available for delivery again",
                [(lb, r[5]) for lb, r in zip(labels, rows)])


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
        #: more families (the schema registry's), each called at a scrape on the loop
        self.sources: list[Callable[[], list[Metric]]] = []
        self.extra: list[Metric] = []

    def take(self) -> None:
        # a deleted topic's meters go, as Kafka removes them (and those of names that never existed)
        topics = self.services.image.topics
        counted = self.metrics.topics
        for name in [t for t in counted if t not in topics]:
            del counted[name]
        self.counters = self.metrics.snapshot()
        self.state = take_state(self.services, self.connections, self.listeners)
        self.extra = [family for source in self.sources for family in source()]


class BrokerRegistry:
    """What ``/metrics`` renders: snapshots of the counters and the broker's state (taken on the
    loop by :meth:`snapshot`), and the process; :meth:`render` may run on another thread."""

    def __init__(
        self, metrics: BrokerMetrics, services: Services, connections: Callable[[], Iterable[Any]], listeners: list[str]
    ) -> None:
        self._snapshots = _Snapshots(metrics, services, connections, listeners)
        self._registry: CollectorRegistry | None = None

    def add_source(self, families: Callable[[], list[Metric]]) -> None:
        """Families to show beside the broker's: ``families`` is called on the loop at each scrape
        and gives copies, rendered with the rest."""
        self._snapshots.sources.append(families)

    def snapshot(self) -> None:
        self._snapshots.take()

    def render(self) -> tuple[bytes, str]:
        if self._registry is None:  # prometheus_client is imported here, at the first scrape
            snaps = self._snapshots
            self._registry = make_registry(
                MetricsCollector(lambda: snaps.counters, request_name, api_name),
                [lambda: state_families(snaps.state), lambda: iter(snaps.extra)],
            )
        return render(self._registry)


# -- the HTTP side ---------------------------------------------------------------------------------

def _split_host(value: str) -> tuple[str, int | None] | None:
    """``(name, port)`` of a Host header value (``name``, ``name:port``, ``[v6]:port``), the name
    lower-cased without a trailing dot; None when it is not one."""
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[1:end], value[end + 1 :]
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:] if rest else None
    else:
        name, sep, port_text_ = value.rpartition(":")
        if not sep:
            name, port_text = value, None
        else:
            port_text = port_text_
    if port_text is not None and (not port_text.isdigit() or len(port_text) > 5 or int(port_text) > 65535):
        return None
    name = name.lower().rstrip(".")
    if not name or not re.fullmatch(r"[a-z0-9._:\-%]+", name):
        return None
    return name, int(port_text) if port_text is not None else None


def _same_address(a: str, b: str) -> bool:
    try:
        return ipaddress.ip_address(a.split("%")[0]) == ipaddress.ip_address(b.split("%")[0])
    except ValueError:
        return False


class MetricsAccess:
    """Who may read ``/metrics``: the Host header check, and HTTP Basic credentials if set."""

    LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "ip6-localhost"})

    def __init__(
        self,
        allowed_hosts: Iterable[str] = (),
        user: str | None = None,
        password: str | None = None,
        machine_names: Iterable[str] | None = None,
    ) -> None:
        self.any_host = False
        self.allowed: set[tuple[str, int | None]] = set()
        for entry in allowed_hosts:
            entry = entry.strip()
            if not entry:
                continue
            if entry == "*":
                self.any_host = True
                continue
            split = _split_host(entry)
            if split is None:
                raise ConfigError(f"metrics.http.allowed.hosts: {entry!r} is not a host name or host:port")
            self.allowed.add(split)
        if (user is None) != (password is None):
            raise ConfigError(
                "metrics.http.basic.auth.user and metrics.http.basic.auth.password go together: set both or neither"
            )
        if user is not None and ":" in user:
            raise ConfigError("metrics.http.basic.auth.user cannot hold a ':' (HTTP Basic separates it from the password)")
        self._credentials = None if user is None or password is None else (user.encode(), password.encode())
        if machine_names is None:
            machine_names = {socket.gethostname()}  # the FQDN is added by the server (a lookup)
        self.machine_names = {n.lower().rstrip(".") for n in machine_names if n}

    @classmethod
    def from_settings(cls, settings: MetricsSettings) -> MetricsAccess:
        user, password = settings.http_basic_auth_user, settings.http_basic_auth_password
        return cls(list(settings.http_allowed_hosts), user or None, password or None)

    @property
    def basic_auth(self) -> bool:
        return self._credentials is not None

    def host_allowed(self, request: HttpRequest, bound: tuple[str, int], local: str | None) -> bool:
        """Whether the request's Host names this endpoint (see the module's docstring)."""
        value = request.headers.get("host")
        if value is None:
            return request.version == "HTTP/1.0"  # HTTP/1.1 requires Host; no browser omits it
        if self.any_host:
            return True
        split = _split_host(value)
        if split is None:
            return False
        name, port = split
        if (name, port) in self.allowed or (name, None) in self.allowed:
            return True
        if port is not None and port != bound[1]:
            return False
        if name in self.LOCAL_NAMES or name.endswith(".localhost") or name in self.machine_names:
            return True
        bound_host = bound[0]
        if bound_host not in ("", "0.0.0.0", "::") and (name == bound_host.lower() or _same_address(name, bound_host)):
            return True
        return local is not None and _same_address(name, local)

    def authorized(self, request: HttpRequest) -> bool:
        """The request carries the configured Basic credentials (always, when none are set)."""
        if self._credentials is None:
            return True
        scheme, _, encoded = request.headers.get("authorization", "").strip().partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        user, sep, password = decoded.partition(b":")
        want_user, want_password = self._credentials
        # both compared, whatever the first gives: the time taken says nothing about which was wrong
        ok_user = hmac.compare_digest(user, want_user)
        ok_password = hmac.compare_digest(password, want_password)
        return bool(sep) and ok_user and ok_password


class MetricsServer:
    """``GET /metrics`` on an asyncio listener of the broker's loop: the registry's snapshot is
    taken on the loop, the text rendered on a worker thread (one scrape at a time)."""

    def __init__(self, registry: BrokerRegistry, access: MetricsAccess) -> None:
        """``access``: who may read it (``MetricsAccess.from_settings(settings.metrics)``)."""
        self.registry = registry
        self.access = access
        self._server: TcpServer | None = None
        self._scraping = asyncio.Lock()
        self.address: tuple[str, int] = ("", 0)
        self._refused_hosts: set[str] = set()  # Host values refused so far (logged once each)

    @property
    def url(self) -> str:
        host, port = self.address
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{port}/metrics"

    async def start(self, host: str, port: int) -> None:
        self._server = await TcpServer.start(self._serve, host, port)
        self.address = self._server.address
        # this machine's fully qualified name is a Host a scraper may use: a DNS lookup, off the loop
        loop = asyncio.get_running_loop()
        with contextlib.suppress(Exception):
            fqdn = await wait_for(loop.run_in_executor(None, socket.getfqdn), 5)
            self.access.machine_names.add(fqdn.lower().rstrip("."))

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
            local = writer.get_extra_info("sockname")
            status, ctype, body, extra, head_only = await self._answer(head, local[0] if local else None)
            header = (
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n{extra}"
                "Connection: close\r\n\r\n"
            ).encode()
            writer.write(header if head_only else header + body)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        finally:
            writer.close()

    async def _answer(self, head: bytes, local: str | None) -> tuple[str, str, bytes, str, bool]:
        """(status, content type, body, extra header lines, HEAD) for one request head."""
        try:
            request = parse_request_head(head)
        except BadHttpRequest as exc:
            return "400 Bad Request", "text/plain", f"bad request: {exc}\n".encode(), "", False
        head_only = request.method == "HEAD"
        if not self.access.host_allowed(request, self.address, local):
            value = request.headers.get("host", "(none)")[:100]
            if value not in self._refused_hosts and len(self._refused_hosts) < 100:
                self._refused_hosts.add(value)
                log.info("metrics: refused a request with Host %r (allowed: this endpoint's addresses and names, "
                         "localhost, metrics.http.allowed.hosts)", value)
            body = b"this Host is not allowed here: add it to metrics.http.allowed.hosts\n"
            return "403 Forbidden", "text/plain", body, "", head_only
        if not self.access.authorized(request):
            return ("401 Unauthorized", "text/plain", b"authentication required\n",
                    'WWW-Authenticate: Basic realm="odradek metrics", charset="UTF-8"\r\n', head_only)
        if request.method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"only GET\n", "Allow: GET, HEAD\r\n", head_only
        path = request.path
        if path == "/metrics":
            try:
                async with self._scraping:
                    self.registry.snapshot()
                    body, ctype = await asyncio.get_running_loop().run_in_executor(None, self.registry.render)
            except Exception:
                log.exception("rendering /metrics failed")
                return "500 Internal Server Error", "text/plain", b"metrics failed\n", "", head_only
            return "200 OK", ctype, body, "", head_only
        if path == "/":
            return "200 OK", "text/html", b'<html><body><a href="/metrics">/metrics</a></body></html>\n', "", head_only
        return "404 Not Found", "text/plain", b"not found: try /metrics\n", "", head_only


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    """The request line and headers (at most 64 KiB, within 10 s)."""
    return await wait_for(reader.readuntil(b"\r\n\r\n"), 10)
