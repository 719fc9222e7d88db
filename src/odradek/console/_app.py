"""The console's pages: routing, the Admin / SimpleConsumer calls behind each page, and the
guards around mutating actions (POST only, CSRF token and same-origin check, read-only mode)."""

from __future__ import annotations

import asyncio
import datetime as dt
import hmac
import importlib.resources
import logging
import re
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from odradek import __version__
from odradek.client import (
    AdminError,
    AlterConfigOp,
    AsyncAdmin,
    AsyncSimpleConsumer,
    ConfigResource,
    NewTopic,
)
from odradek.client.admin import (
    ConfigSource,
    GroupDescription,
    ListOffsetsResultInfo,
    PartitionLag,
    TopicDescription,
)
from odradek.console._html import Page, e, form_hidden, link, q, table, url
from odradek.console._http import Request, Response
from odradek.console._render import FORMATS, header_text, matches, render
from odradek.console._throughput import ThroughputSampler
from odradek.errors import ErrorCode, KafkaError, OdradekError

__all__ = ["ConsoleApp"]

log = logging.getLogger("odradek.console")

TopicPartition = tuple[str, int]
_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_STATIC = {
    "console.css": "text/css; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
#: the message browser's bounds: records shown, records scanned by a search, fetches per partition
MAX_LIMIT = 500
MAX_SCANNED = 20_000
MAX_FETCHES = 200
FETCH_BYTES = 1024 * 1024
RESET_STRATEGIES = ("earliest", "latest", "offset", "timestamp", "shift")
_NOTICES = {
    "created": "Topic created.",
    "deleted": "Topic deleted.",
    "config-set": "Config updated.",
    "config-deleted": "Config override removed: the default applies again.",
}


_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def _host_name(host: str) -> str:
    """The name in a Host header, without the port (and the brackets of an IPv6 address)."""
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0].lower()


class HttpError(OdradekError):
    """A page's answer is an error page with this HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _num(x: int | float | None) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.1f}"
    return f"{x:,}"


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_LAST_MS = (dt.datetime.max.replace(tzinfo=dt.UTC) - _EPOCH) // dt.timedelta(milliseconds=1)


def _ms_text(ms: int) -> str:
    """A record's timestamp as UTC time; -1 (Kafka's "no timestamp") as "-".  A producer may set
    any 64-bit value: one before 1970 or after the year 9999 is shown as the number of
    milliseconds it is."""
    if ms == -1:
        return "-"
    if not 0 <= ms <= _LAST_MS:
        return f"{ms} ms"
    return (_EPOCH + dt.timedelta(milliseconds=ms)).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _parse_time(text: str) -> int:
    """Milliseconds since the epoch from digits (already ms) or an ISO 8601 time (UTC unless it says)."""
    text = text.strip()
    if text.isdigit():
        ms = int(text)
    else:
        try:
            when = dt.datetime.fromisoformat(text)
        except ValueError:
            raise HttpError(400, f"not a time: {text!r} (use ISO 8601, e.g. 2026-01-31T12:00:00, or ms)") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        ms = (when - _EPOCH) // dt.timedelta(milliseconds=1)
    # ListOffsets takes a 64-bit time, and reads the negative ones as "latest", "earliest", ...
    if not 0 <= ms < 1 << 63:
        raise HttpError(400, f"not a time Kafka can search for: {text!r} (from 1970 on, in ms below 2^63)")
    return ms


def _int(text: str, what: str, *, minimum: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise HttpError(400, f"{what} must be a whole number, not {text!r}") from None
    if minimum is not None and value < minimum:
        raise HttpError(400, f"{what} must be at least {minimum}")
    return value


class ConsoleApp:
    """The pages, over one :class:`AsyncAdmin` and one :class:`AsyncSimpleConsumer`."""

    def __init__(
        self,
        client_config: Mapping[str, Any],
        *,
        read_only: bool = False,
        timeout: float = 15.0,
        sample_interval: float = 5.0,
        loopback_only: bool = False,
    ) -> None:
        cfg = dict(client_config)
        #: served on a loopback address: only loopback names in the Host header (no DNS rebinding)
        self.loopback_only = loopback_only
        cfg.setdefault("client.id", "odradek-console")
        self.bootstrap = str(cfg["bootstrap.servers"])
        self.read_only = read_only
        self.timeout = timeout
        ms = int(timeout * 1000)
        self.admin = AsyncAdmin({**cfg, "default.api.timeout.ms": ms, "request.timeout.ms": ms})
        self.consumer = AsyncSimpleConsumer(
            {**cfg, "request.timeout.ms": ms, "fetch.max.wait.ms": 100, "max.partition.fetch.bytes": FETCH_BYTES}
        )
        self.sampler = ThroughputSampler(self.admin, interval=sample_interval, timeout=timeout)
        self.csrf_token = secrets.token_urlsafe(32)
        self.page = Page(bootstrap=self.bootstrap, read_only=read_only, version=__version__)
        self._routes: list[tuple[str, re.Pattern[str], Callable[..., Awaitable[Response]]]] = [
            ("GET", re.compile(r"/"), self.overview),
            ("GET", re.compile(r"/topics"), self.topics),
            ("POST", re.compile(r"/topics"), self.create_topic),
            ("GET", re.compile(r"/topics/([^/]+)"), self.topic),
            ("GET", re.compile(r"/topics/([^/]+)/messages"), self.messages),
            ("GET", re.compile(r"/topics/([^/]+)/configs"), self.topic_configs),
            ("POST", re.compile(r"/topics/([^/]+)/configs"), self.alter_topic_config),
            ("GET", re.compile(r"/topics/([^/]+)/delete"), self.confirm_delete),
            ("POST", re.compile(r"/topics/([^/]+)/delete"), self.delete_topic),
            ("GET", re.compile(r"/groups"), self.groups),
            ("GET", re.compile(r"/groups/([^/]+)"), self.group),
            ("POST", re.compile(r"/groups/([^/]+)/reset"), self.reset_offsets),
            ("GET", re.compile(r"/throughput"), self.throughput),
            ("GET", re.compile(r"/api/throughput"), self.api_throughput),
            ("GET", re.compile(r"/api/overview"), self.api_overview),
            ("GET", re.compile(r"/static/([a-z.]+)"), self.static),
            ("GET", re.compile(r"/favicon\.ico"), self.favicon),
        ]

    async def start(self) -> None:
        self.sampler.start()

    async def close(self) -> None:
        await self.sampler.close()
        for closer in (self.consumer.close, self.admin.close):
            try:
                await closer()
            except Exception:  # closing anyway
                log.debug("console: close failed", exc_info=True)

    # -- dispatch --------------------------------------------------------------------------------
    async def __call__(self, request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        if self.loopback_only and _host_name(request.headers.get("host", "")) not in _LOOPBACK:
            return self._error_page(403, "this console answers only to 127.0.0.1, localhost or [::1]")
        allowed = False
        for route_method, pattern, handler in self._routes:
            m = pattern.fullmatch(request.path)
            if m is None:
                continue
            allowed = True
            if route_method != method:
                continue
            args = [unquote(g) for g in m.groups()]
            try:
                if method == "POST":
                    self._check_post(request)
                return await handler(request, *args)
            except HttpError as exc:
                return self._error_page(exc.status, str(exc))
            except KafkaError as exc:
                status = 404 if exc.code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.GROUP_ID_NOT_FOUND) else 502
                where = "" if status == 404 else f"the cluster at {self.bootstrap} answered "
                return self._error_page(status, f"{where}{exc.code.name}: {exc.message or exc.code.name}")
            except (OdradekError, OSError) as exc:  # OSError: ConnectionError, TimeoutError
                return self._error_page(502, f"the cluster at {self.bootstrap} did not answer: {exc or type(exc).__name__}")
        if allowed:
            return self._error_page(405, f"{request.method} is not allowed here")
        return self._error_page(404, f"no page at {request.path}")

    def _check_post(self, request: Request) -> None:
        """Mutations: refused in read-only mode; need this console's CSRF token and, when the
        browser says where the form came from, this console as its origin."""
        if self.read_only:
            raise HttpError(403, "the console is read-only: no changes can be made from it")
        token = request.form.get("csrf", "")
        if not token or not hmac.compare_digest(token.encode(), self.csrf_token.encode()):
            raise HttpError(403, "missing or wrong CSRF token: reload the page and try again")
        origin = request.headers.get("origin")
        host = request.headers.get("host", "")
        if origin and origin != "null" and urlsplit(origin).netloc != host:
            raise HttpError(403, "cross-origin form posts are refused")
        if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            raise HttpError(403, "cross-site form posts are refused")

    def _error_page(self, status: int, message: str) -> Response:
        content = f'<p class="lead">HTTP {status}</p><p>{link("/", "Back to the overview")}</p>'
        return Response.html(self.page.render("Error", content, error=message, page_id="error"), status)

    def _csrf(self) -> str:
        return form_hidden(csrf=self.csrf_token)

    def _notice(self, request: Request) -> str | None:
        return _NOTICES.get(request.query.get("notice", ""))

    # -- data helpers ----------------------------------------------------------------------------
    async def _offsets(self, specs: dict[TopicPartition, Any]) -> dict[TopicPartition, ListOffsetsResultInfo]:
        """Offsets of the partitions that answer (a partition without a leader shows none)."""
        if not specs:
            return {}
        try:
            return await self.admin.list_offsets(specs, timeout=self.timeout)
        except AdminError as exc:
            return exc.results

    async def _topic_or_404(self, name: str) -> TopicDescription:
        try:
            topics = await self.admin.describe_topics([name], timeout=self.timeout)
        except KafkaError as exc:
            if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise HttpError(404, f"topic {name!r} does not exist") from None
            raise
        if name not in topics:
            raise HttpError(404, f"topic {name!r} does not exist")
        return topics[name]

    # -- overview --------------------------------------------------------------------------------
    async def _overview_data(self) -> dict[str, Any]:
        cluster, topics, groups = await asyncio.gather(
            self.admin.describe_cluster(timeout=self.timeout),
            self.admin.describe_topics(None, timeout=self.timeout),
            self.admin.list_groups(timeout=self.timeout),
        )
        partitions = [p for t in topics.values() for p in t.partitions]
        return {
            "cluster_id": cluster.cluster_id,
            "controller": cluster.controller_id,
            "brokers": [
                {"id": b.id, "host": b.host, "port": b.port, "rack": b.rack} for b in sorted(cluster.brokers, key=lambda b: b.id)
            ],
            "topics": len([t for t in topics.values() if not t.internal]),
            "internal_topics": len([t for t in topics.values() if t.internal]),
            "partitions": len(partitions),
            "under_replicated": sum(1 for p in partitions if len(p.isr) < len(p.replicas)),
            "offline": sum(1 for p in partitions if p.leader < 0),
            "groups": len(groups),
            "leaders": {b.id: sum(1 for p in partitions if p.leader == b.id) for b in cluster.brokers},
        }

    async def api_overview(self, request: Request) -> Response:
        data = await self._overview_data()
        data["leaders"] = {str(k): v for k, v in data["leaders"].items()}
        return Response.json(data)

    async def overview(self, request: Request) -> Response:
        d = await self._overview_data()
        series = self.sampler.series()
        rate = series[-1]["messages_per_s"] if series else None

        def stat(label: str, value: object, test_id: str, warn: bool = False) -> str:
            cls = "stat warn" if warn else "stat"
            return f'<div class="{cls}" data-testid="{e(test_id)}"><span class="v">{e(value)}</span><span class="l">{e(label)}</span></div>'

        stats = "".join([
            stat("brokers", len(d["brokers"]), "stat-brokers"),
            stat("controller", d["controller"] if d["controller"] >= 0 else "none", "stat-controller"),
            stat("topics", d["topics"], "stat-topics"),
            stat("partitions", d["partitions"], "stat-partitions"),
            stat("under-replicated", d["under_replicated"], "stat-under-replicated", d["under_replicated"] > 0),
            stat("offline", d["offline"], "stat-offline", d["offline"] > 0),
            stat("consumer groups", d["groups"], "stat-groups"),
            stat("messages in /s", _num(rate) if rate is not None else "…", "stat-rate"),
        ])
        rows = [
            [
                e(b["id"]) + (' <span class="badge">controller</span>' if b["id"] == d["controller"] else ""),
                e(b["host"]),
                e(b["port"]),
                e(b["rack"] or "-"),
                e(d["leaders"].get(b["id"], 0)),
            ]
            for b in d["brokers"]
        ]
        content = (
            f'<dl class="facts"><dt>Cluster id</dt><dd data-testid="cluster-id">{e(d["cluster_id"] or "-")}</dd>'
            f"<dt>Bootstrap</dt><dd>{e(self.bootstrap)}</dd>"
            f"<dt>Internal topics</dt><dd>{e(d['internal_topics'])}</dd></dl>"
            f'<div class="stats">{stats}</div>'
            "<h2>Brokers</h2>"
            + table(["Id", "Host", "Port", "Rack", "Leader of"], rows, numeric=[4], test_id="brokers")
        )
        return Response.html(self.page.render("Overview", content, active="/", page_id="overview"))

    # -- topics ----------------------------------------------------------------------------------
    async def topics(self, request: Request) -> Response:
        show_internal = request.query.get("internal") == "1"
        described = await self.admin.describe_topics(None, timeout=self.timeout)
        topics = {n: t for n, t in sorted(described.items()) if show_internal or not t.internal}
        tps = [(n, p.partition) for n, t in topics.items() for p in t.partitions]
        earliest, latest = await asyncio.gather(
            self._offsets(dict.fromkeys(tps, "earliest")), self._offsets(dict.fromkeys(tps, "latest"))
        )
        rates = self.sampler.topic_rates()
        rows = []
        for n, t in topics.items():
            count = 0
            for p in t.partitions:
                lo, hi = earliest.get((n, p.partition)), latest.get((n, p.partition))
                if lo is not None and hi is not None:
                    count += max(hi.offset - lo.offset, 0)
            urp = sum(1 for p in t.partitions if len(p.isr) < len(p.replicas))
            rows.append([
                link(f"/topics/{q(n)}", n) + (' <span class="badge">internal</span>' if t.internal else ""),
                e(len(t.partitions)),
                e(t.replication_factor),
                e(urp) if not urp else f'<span class="warn">{e(urp)}</span>',
                e(_num(count)),
                e(_num(rates[n]) if n in rates else "…"),
            ])
        toggle = (
            link("/topics", "hide internal topics") if show_internal else link("/topics?internal=1", "show internal topics")
        )
        content = f'<p class="tools">{toggle}</p>' + table(
            ["Topic", "Partitions", "Replication", "Under-replicated", "Messages", "Messages in /s"],
            rows,
            numeric=[1, 2, 3, 4, 5],
            empty="no topics yet",
            test_id="topics",
        )
        if not self.read_only:
            content += self._create_form({})
        return Response.html(
            self.page.render("Topics", content, active="/topics", notice=self._notice(request), page_id="topics")
        )

    def _create_form(self, values: Mapping[str, str]) -> str:
        return (
            '<h2>Create a topic</h2><form method="post" action="/topics" class="create" data-testid="create-topic">'
            + self._csrf()
            + f'<label>Name <input name="name" required pattern="[a-zA-Z0-9._\\-]+" maxlength="249" value="{e(values.get("name", ""))}"></label>'
            + f'<label>Partitions <input name="partitions" type="number" min="1" value="{e(values.get("partitions", "1"))}"></label>'
            + f'<label>Replication factor <input name="replication_factor" type="number" min="1" placeholder="broker default" value="{e(values.get("replication_factor", ""))}"></label>'
            + '<label class="wide">Configs (one <code>key=value</code> a line) <textarea name="configs" rows="3">'
            + e(values.get("configs", ""))
            + '</textarea></label><button type="submit">Create topic</button></form>'
        )

    async def create_topic(self, request: Request) -> Response:
        name = request.arg("name")
        values = dict(request.form)
        try:
            if not _TOPIC_NAME.match(name) or name in (".", ".."):
                raise HttpError(400, f"invalid topic name {name!r}: use letters, digits, '.', '_' and '-'")
            partitions = _int(request.arg("partitions", "-1"), "partitions")
            rf_text = request.arg("replication_factor")
            rf = _int(rf_text, "replication factor") if rf_text else -1
            configs: dict[str, str] = {}
            for line in request.arg("configs").splitlines():
                if not line.strip():
                    continue
                key, sep, value = line.partition("=")
                if not sep or not key.strip():
                    raise HttpError(400, f"configs take key=value lines, not {line!r}")
                configs[key.strip()] = value.strip()
            await self.admin.create_topics([NewTopic(name, partitions, rf, configs)], timeout=self.timeout)
        except (HttpError, KafkaError) as exc:
            message = str(exc) if isinstance(exc, HttpError) else f"{exc.code.name}: {exc.message or ''}"
            status = exc.status if isinstance(exc, HttpError) else 400
            content = self._create_form(values)
            return Response.html(
                self.page.render("Topics", content, active="/topics", error=message, page_id="topics"), status
            )
        return Response.redirect(f"/topics/{q(name)}?notice=created")

    def _topic_tabs(self, name: str, active: str) -> str:
        tabs = [("", "Partitions"), ("/messages", "Messages"), ("/configs", "Configs")]
        if not self.read_only:
            tabs.append(("/delete", "Delete"))
        out = "".join(
            f'<a href="/topics/{e(q(name))}{suffix}"{" class=active" if suffix == active else ""}>{e(label)}</a>'
            for suffix, label in tabs
        )
        return f'<nav class="tabs">{out}</nav>'

    async def topic(self, request: Request, name: str) -> Response:
        t = await self._topic_or_404(name)
        tps = [(name, p.partition) for p in t.partitions]
        earliest, latest = await asyncio.gather(
            self._offsets(dict.fromkeys(tps, "earliest")), self._offsets(dict.fromkeys(tps, "latest"))
        )
        rows = []
        total = 0
        for p in sorted(t.partitions, key=lambda p: p.partition):
            lo, hi = earliest.get((name, p.partition)), latest.get((name, p.partition))
            count = max(hi.offset - lo.offset, 0) if lo is not None and hi is not None else None
            total += count or 0
            isr_cls = "warn" if len(p.isr) < len(p.replicas) else ""
            rows.append([
                link(url(f"/topics/{q(name)}/messages", partition=p.partition), p.partition),
                e(p.leader) if p.leader >= 0 else '<span class="warn">none</span>',
                e(",".join(map(str, p.replicas))),
                f'<span class="{isr_cls}">{e(",".join(map(str, p.isr)))}</span>',
                e(",".join(map(str, p.offline_replicas)) or "-"),
                e(_num(lo.offset) if lo else "-"),
                e(_num(hi.offset) if hi else "-"),
                e(_num(count)),
            ])
        head = (
            f'<dl class="facts"><dt>Partitions</dt><dd>{len(t.partitions)}</dd>'
            f"<dt>Replication factor</dt><dd>{t.replication_factor}</dd>"
            f"<dt>Topic id</dt><dd>{e(t.topic_id or '-')}</dd>"
            f"<dt>Internal</dt><dd>{'yes' if t.internal else 'no'}</dd></dl>"
        )
        content = self._topic_tabs(name, "") + head + table(
            ["Partition", "Leader", "Replicas", "ISR", "Offline", "Log start", "Log end", "Messages"],
            rows,
            numeric=[0, 5, 6, 7],
            foot=["Total", "", "", "", "", "", "", e(_num(total))],
            test_id="partitions",
        )
        return Response.html(
            self.page.render(f"Topic {name}", content, active="/topics", notice=self._notice(request), page_id="topic")
        )

    # -- configs ---------------------------------------------------------------------------------
    async def topic_configs(self, request: Request, name: str, *, error: str | None = None) -> Response:
        await self._topic_or_404(name)
        resource = ConfigResource("topic", name)
        entries = (await self.admin.describe_configs([resource], include_synonyms=False, timeout=self.timeout))[resource]
        rows = []
        for entry in sorted(entries.values(), key=lambda c: c.name):
            value = "(sensitive)" if entry.is_sensitive else ("" if entry.value is None else entry.value)
            override = entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG
            if self.read_only or entry.read_only or entry.is_sensitive:
                cell = f"<code>{e(value)}</code>"
                action = ""
            else:
                cell = (
                    f'<form method="post" action="/topics/{e(q(name))}/configs" class="inline">{self._csrf()}'
                    + form_hidden(name=entry.name, op="set")
                    + f'<input name="value" value="{e(value)}" aria-label="{e(entry.name)}">'
                    + '<button type="submit">Save</button></form>'
                )
                action = ""
                if override:
                    action = (
                        f'<form method="post" action="/topics/{e(q(name))}/configs" class="inline">{self._csrf()}'
                        + form_hidden(name=entry.name, op="delete")
                        + '<button type="submit" class="secondary">Reset to default</button></form>'
                    )
            source = entry.source.name.lower().replace("_", " ")
            rows.append([
                f"<code>{e(entry.name)}</code>",
                cell,
                f'<span class="{"override" if override else "muted"}">{e(source)}</span>',
                action,
            ])
        content = self._topic_tabs(name, "/configs") + table(
            ["Config", "Value", "Source", ""], rows, cls="grid configs", test_id="configs"
        )
        return Response.html(
            self.page.render(
                f"Topic {name}: configs",
                content,
                active="/topics",
                notice=self._notice(request),
                error=error,
                page_id="configs",
            ),
            400 if error else 200,
        )

    async def alter_topic_config(self, request: Request, name: str) -> Response:
        key = request.form.get("name", "").strip()
        op = request.form.get("op", "set")
        if not key:
            raise HttpError(400, "which config? (name is empty)")
        change = AlterConfigOp.delete(key) if op == "delete" else AlterConfigOp.set(key, request.form.get("value", ""))
        try:
            await self.admin.incremental_alter_configs({ConfigResource("topic", name): [change]}, timeout=self.timeout)
        except KafkaError as exc:
            if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise
            return await self.topic_configs(
                request, name, error=f"{key}: {exc.code.name}: {exc.message or ''}".rstrip(": ")
            )
        notice = "config-deleted" if op == "delete" else "config-set"
        return Response.redirect(f"/topics/{q(name)}/configs?notice={notice}")

    # -- delete ----------------------------------------------------------------------------------
    async def confirm_delete(self, request: Request, name: str) -> Response:
        if self.read_only:
            raise HttpError(403, "the console is read-only: topics cannot be deleted from it")
        t = await self._topic_or_404(name)
        content = (
            self._topic_tabs(name, "/delete")
            + f'<div class="danger-zone"><p>Deleting <strong>{e(name)}</strong> removes its {len(t.partitions)} '
            "partition(s) and every record in them. Consumers and producers of it will fail. "
            "This cannot be undone.</p>"
            f'<form method="post" action="/topics/{e(q(name))}/delete" data-testid="confirm-delete">{self._csrf()}'
            "<label>Type the topic name to confirm "
            f'<input name="confirm" autocomplete="off" required aria-label="topic name"></label>'
            '<button type="submit" class="danger">Delete topic</button> '
            f"{link(f'/topics/{q(name)}', 'Cancel')}</form></div>"
        )
        return Response.html(self.page.render(f"Delete topic {name}?", content, active="/topics", page_id="delete"))

    async def delete_topic(self, request: Request, name: str) -> Response:
        if request.form.get("confirm", "").strip() != name:
            raise HttpError(400, "the name typed does not match the topic: nothing was deleted")
        await self.admin.delete_topics([name], timeout=self.timeout)
        return Response.redirect("/topics?notice=deleted")

    # -- message browser -------------------------------------------------------------------------
    async def _read_partition(
        self, topic: str, partition: int, position: str, value: str, limit: int, needle: str
    ) -> tuple[list[Any], int, int, int, int]:
        """Records of one partition: ``(records, start offset, log start, log end, scanned)``."""
        lo = await self.consumer.earliest_offset(topic, partition)
        hi = await self.consumer.latest_offset(topic, partition)
        if position == "latest":
            start = max(lo, hi - limit)
        elif position == "offset":
            start = min(max(_int(value or "0", "offset", minimum=0), lo), hi)
        elif position == "timestamp":
            found = await self.consumer.offset_for_time(topic, partition, _parse_time(value))
            start = hi if found is None else max(found, lo)
        else:
            start = lo
        out: list[Any] = []
        offset = start
        scanned = 0
        for _ in range(MAX_FETCHES):
            if offset >= hi or len(out) >= limit or scanned >= MAX_SCANNED:
                break
            batch = await self.consumer.fetch(topic, partition, offset, FETCH_BYTES)
            for r in batch:
                if r.offset < offset or r.offset >= hi:
                    continue
                scanned += 1
                if matches(needle, r.key, r.value, r.headers):
                    out.append(r)
                    if len(out) >= limit:
                        break
            if batch.next_offset <= offset:
                break
            offset = batch.next_offset
        return out[:limit], start, lo, hi, scanned

    async def messages(self, request: Request, name: str) -> Response:
        t = await self._topic_or_404(name)
        parts = sorted(p.partition for p in t.partitions)
        part_text = request.arg("partition", "0" if len(parts) == 1 else "all")
        position = request.arg("position", "earliest")
        if position not in ("earliest", "latest", "offset", "timestamp"):
            raise HttpError(400, f"unknown position {position!r}")
        value = request.arg("offset") if position == "offset" else request.arg("timestamp")
        limit = min(_int(request.arg("limit", "50"), "limit", minimum=1), MAX_LIMIT)
        fmt = request.arg("format", "auto")
        if fmt not in FORMATS:
            raise HttpError(400, f"unknown format {fmt!r}")
        needle = request.arg("q")
        if part_text == "all":
            if position == "offset":
                raise HttpError(400, "an offset needs one partition: choose a partition")
            chosen = parts
        else:
            p = _int(part_text, "partition", minimum=0)
            if p not in parts:
                raise HttpError(404, f"topic {name!r} has no partition {p}")
            chosen = [p]
        if position == "timestamp" and not value:
            raise HttpError(400, "give a timestamp (ISO 8601 or ms since the epoch)")
        results = await asyncio.gather(*(self._read_partition(name, p, position, value, limit, needle) for p in chosen))
        records = [r for res in results for r in res[0]]
        if len(chosen) > 1:
            records.sort(key=lambda r: (r.timestamp, r.partition, r.offset))
            if position == "latest":
                records = records[-limit:]
            else:
                records = records[:limit]
        scanned = sum(res[4] for res in results)
        form = self._browse_form(name, parts, part_text, position, value, limit, fmt, needle)
        rows = []
        for r in records:
            key_text, key_kind = render(r.key, fmt)
            val_text, val_kind = render(r.value, fmt)
            headers = "".join(
                f'<div class="hdr"><code>{e(h)}</code>: <span>{e(header_text(v, fmt))}</span></div>'
                for h, v in r.headers
            )
            rows.append([
                e(r.partition),
                e(r.offset),
                f'<span class="ts">{e(_ms_text(r.timestamp))}</span>',
                f'<pre class="{e(key_kind.split("+")[0])}" data-kind="{e(key_kind)}">{e(key_text)}</pre>',
                f'<pre class="{e(val_kind.split("+")[0])}" data-kind="{e(val_kind)}">{e(val_text)}</pre>',
                headers or '<span class="muted">-</span>',
            ])
        ranges = ", ".join(f"p{p}: {res[2]} to {res[3]}" for p, res in zip(chosen, results))
        summary = (
            f'<p class="summary" data-testid="browse-summary">{len(records)} record(s) shown'
            + (f", {scanned} scanned for “{e(needle)}”" if needle else "")
            + f". Offsets {e(ranges)}.</p>"
        )
        content = (
            self._topic_tabs(name, "/messages")
            + form
            + summary
            + table(
                ["Partition", "Offset", "Timestamp", "Key", "Value", "Headers"],
                rows,
                cls="grid records",
                numeric=[0, 1],
                empty="no records here",
                test_id="records",
            )
        )
        return Response.html(self.page.render(f"Topic {name}: messages", content, active="/topics", page_id="messages"))

    def _browse_form(
        self, name: str, parts: list[int], part: str, position: str, value: str, limit: int, fmt: str, needle: str
    ) -> str:
        def options(items: list[tuple[str, str]], chosen: str) -> str:
            return "".join(
                f'<option value="{e(v)}"{" selected" if v == chosen else ""}>{e(label)}</option>' for v, label in items
            )

        part_opts = [("all", "all partitions")] + [(str(p), str(p)) for p in parts]
        pos_opts = [("earliest", "oldest first"), ("latest", "newest"), ("offset", "from offset"), ("timestamp", "from time")]
        return (
            f'<form method="get" action="/topics/{e(q(name))}/messages" class="browse" data-testid="browse">'
            f'<label>Partition <select name="partition">{options(part_opts, part)}</select></label>'
            f'<label>Start <select name="position">{options(pos_opts, position)}</select></label>'
            f'<label>Offset <input name="offset" type="number" min="0" value="{e(value if position == "offset" else "")}"></label>'
            f'<label>Time <input name="timestamp" placeholder="2026-01-31T12:00:00 or ms" value="{e(value if position == "timestamp" else "")}"></label>'
            f'<label>Max <input name="limit" type="number" min="1" max="{MAX_LIMIT}" value="{limit}"></label>'
            f'<label>Show as <select name="format">{options([(f, f) for f in FORMATS], fmt)}</select></label>'
            f'<label>Search <input name="q" type="search" placeholder="text in key, value or headers" value="{e(needle)}"></label>'
            '<button type="submit">Show</button></form>'
        )

    # -- consumer groups -------------------------------------------------------------------------
    async def groups(self, request: Request) -> Response:
        listed = sorted(await self.admin.list_groups(timeout=self.timeout), key=lambda g: g.group_id)
        ids = [g.group_id for g in listed][:200]
        described: dict[str, GroupDescription] = {}
        lags: list[dict[TopicPartition, PartitionLag] | BaseException] = []
        if ids:
            limit = asyncio.Semaphore(8)  # a few groups' coordinators asked at a time

            async def lag_of(group_id: str) -> dict[TopicPartition, PartitionLag]:
                async with limit:
                    return await self.admin.group_lag(group_id, timeout=self.timeout)

            described, lags = await asyncio.gather(
                self.admin.describe_groups(ids, timeout=self.timeout),
                asyncio.gather(*(lag_of(g) for g in ids), return_exceptions=True),
            )
        rows = []
        for gid, lag in zip(ids, lags):
            g = described.get(gid)
            total = "?" if isinstance(lag, BaseException) else _num(sum(x.lag or 0 for x in lag.values()))
            topics = "" if isinstance(lag, BaseException) else ", ".join(sorted({tp[0] for tp in lag}))
            rows.append([
                link(f"/groups/{q(gid)}", gid),
                e(g.state if g else "?"),
                e(g.protocol_type or "-" if g else "?"),
                e(len(g.members) if g else "?"),
                e(topics or "-"),
                e(total),
            ])
        content = table(
            ["Group", "State", "Protocol type", "Members", "Topics", "Total lag"],
            rows,
            numeric=[3, 5],
            empty="no consumer groups",
            test_id="groups",
        )
        return Response.html(self.page.render("Consumer groups", content, active="/groups", page_id="groups"))

    async def group(self, request: Request, group_id: str, *, extra: str = "", error: str | None = None) -> Response:
        described, lags, topics = await asyncio.gather(
            self.admin.describe_groups([group_id], timeout=self.timeout),
            self.admin.group_lag(group_id, timeout=self.timeout),
            self.admin.list_topics(timeout=self.timeout),
        )
        g = described[group_id]
        if g.state == "Dead" and not lags:
            raise HttpError(404, f"consumer group {group_id!r} does not exist")
        facts = (
            f'<dl class="facts"><dt>State</dt><dd data-testid="group-state">{e(g.state)}</dd>'
            f"<dt>Protocol type</dt><dd>{e(g.protocol_type or '-')}</dd>"
            f"<dt>Assignor</dt><dd>{e(g.protocol or '-')}</dd>"
            f"<dt>Coordinator</dt><dd>{e(g.coordinator or '-')}</dd></dl>"
        )
        members = table(
            ["Member", "Client id", "Host", "Instance id", "Assigned partitions"],
            [
                [
                    f"<code>{e(m.member_id)}</code>",
                    e(m.client_id),
                    e(m.host),
                    e(m.group_instance_id or "-"),
                    e(", ".join(f"{t}-{p}" for t, p in sorted(m.assignment)) or "-"),
                ]
                for m in g.members
            ],
            empty="no members (the group is not consuming now)",
            test_id="members",
        )
        rows = []
        total = 0
        for (topic, partition), lag in sorted(lags.items()):
            total += lag.lag or 0
            rows.append([
                link(f"/topics/{q(topic)}", topic),
                e(partition),
                e(_num(lag.committed_offset)),
                e(_num(lag.log_end_offset)),
                e(_num(lag.lag)),
                e(lag.member.client_id if lag.member else "-"),
            ])
        lag_table = table(
            ["Topic", "Partition", "Committed", "Log end", "Lag", "Consumer"],
            rows,
            numeric=[1, 2, 3, 4],
            foot=["Total", "", "", "", f'<span data-testid="total-lag">{e(_num(total))}</span>', ""],
            empty="no committed offsets",
            test_id="lag",
        )
        content = facts + "<h2>Members</h2>" + members + "<h2>Lag</h2>" + lag_table
        if not self.read_only:
            content += self._reset_form(group_id, sorted({tp[0] for tp in lags} | set(topics)), {})
        content += extra
        return Response.html(
            self.page.render(f"Consumer group {group_id}", content, active="/groups", error=error, page_id="group"),
            400 if error else 200,
        )

    def _reset_form(self, group_id: str, topics: list[str], values: Mapping[str, str]) -> str:
        chosen_topic = values.get("topic", "")
        chosen = values.get("strategy", "earliest")
        topic_opts = "".join(
            f'<option value="{e(t)}"{" selected" if t == chosen_topic else ""}>{e(t)}</option>' for t in topics
        )
        strat_opts = "".join(
            f'<option value="{s}"{" selected" if s == chosen else ""}>{s}</option>' for s in RESET_STRATEGIES
        )
        return (
            '<h2>Reset offsets</h2><p class="muted">Only an inactive group (state Empty) can be reset. '
            "Preview shows the new offsets without committing them.</p>"
            f'<form method="post" action="/groups/{e(q(group_id))}/reset" class="reset" data-testid="reset">{self._csrf()}'
            f'<label>Topic <select name="topic">{topic_opts}</select></label>'
            f'<label>Partitions <input name="partitions" placeholder="all, or 0,2" value="{e(values.get("partitions", ""))}"></label>'
            f'<label>To <select name="strategy">{strat_opts}</select></label>'
            f'<label>Offset / time / shift <input name="value" value="{e(values.get("value", ""))}"></label>'
            '<button type="submit" name="action" value="preview">Preview (dry run)</button> '
            '<button type="submit" name="action" value="execute" class="danger">Execute</button></form>'
        )

    async def reset_offsets(self, request: Request, group_id: str) -> Response:
        topic = request.arg("topic")
        strategy = request.arg("strategy", "earliest")
        value = request.arg("value")
        execute = request.arg("action") == "execute"
        if strategy not in RESET_STRATEGIES:
            raise HttpError(400, f"unknown strategy {strategy!r}")
        if not topic:
            raise HttpError(400, "choose a topic")
        t = await self._topic_or_404(topic)
        all_parts = sorted(p.partition for p in t.partitions)
        spec = request.arg("partitions")
        if spec and spec != "all":
            parts = sorted({_int(x.strip(), "partition", minimum=0) for x in spec.split(",") if x.strip()})
            missing = [p for p in parts if p not in all_parts]
            if missing:
                raise HttpError(400, f"topic {topic!r} has no partition {missing[0]}")
        else:
            parts = all_parts
        tps = [(topic, p) for p in parts]
        earliest, latest, committed, described = await asyncio.gather(
            self.admin.list_offsets(dict.fromkeys(tps, "earliest"), timeout=self.timeout),
            self.admin.list_offsets(dict.fromkeys(tps, "latest"), timeout=self.timeout),
            self.admin.list_group_offsets(group_id, tps, timeout=self.timeout),
            self.admin.describe_groups([group_id], timeout=self.timeout),
        )
        target: dict[TopicPartition, int] = {}
        if strategy == "earliest":
            target = {tp: earliest[tp].offset for tp in tps}
        elif strategy == "latest":
            target = {tp: latest[tp].offset for tp in tps}
        elif strategy == "offset":
            to = _int(value, "offset", minimum=0)
            target = dict.fromkeys(tps, to)
        elif strategy == "timestamp":
            found = await self.admin.list_offsets(dict.fromkeys(tps, _parse_time(value)), timeout=self.timeout)
            target = {tp: (found[tp].offset if found[tp].offset >= 0 else latest[tp].offset) for tp in tps}
        else:
            shift = _int(value, "shift")
            target = {
                tp: (committed[tp].offset if tp in committed else latest[tp].offset) + shift for tp in tps
            }
        target = {tp: min(max(o, earliest[tp].offset), latest[tp].offset) for tp, o in target.items()}
        state = described[group_id].state
        rows = [
            [
                e(tp[1]),
                e(_num(committed[tp].offset) if tp in committed else "-"),
                e(_num(target[tp])),
                e(_num(latest[tp].offset - target[tp])),
            ]
            for tp in tps
        ]
        error = None
        if execute and state not in ("Empty", "Dead"):
            error = f"the group is {state}: stop its consumers first (only an inactive group's offsets can be reset)"
            execute = False
        if execute:
            await self.admin.alter_group_offsets(group_id, target, timeout=self.timeout)
        heading = "Offsets reset" if execute else "Preview (dry run: nothing committed)"
        extra = (
            f'<section class="preview" data-testid="reset-result"><h2>{e(heading)}</h2>'
            f"<p>Topic <strong>{e(topic)}</strong>, to <strong>{e(strategy)}</strong>"
            f"{(' ' + e(value)) if value else ''}.</p>"
            + table(["Partition", "Current", "New", "Lag after"], rows, numeric=[0, 1, 2, 3], test_id="reset-preview")
            + "</section>"
        )
        response = await self.group(request, group_id, extra=extra, error=error)
        return response

    # -- throughput ------------------------------------------------------------------------------
    async def throughput(self, request: Request) -> Response:
        content = (
            '<p class="muted">Messages in per second across all topics, from the growth of the partitions\' '
            f"log end offsets sampled every {e(_num(self.sampler.interval))} s by this console; the last 15 minutes.</p>"
            '<div id="chart" class="chart" data-testid="chart" data-src="/api/throughput">'
            '<p class="muted">waiting for samples…</p></div>'
            '<p class="legend"><span id="chart-now">…</span></p>'
        )
        return Response.html(self.page.render("Throughput", content, active="/throughput", page_id="throughput"))

    async def api_throughput(self, request: Request) -> Response:
        return Response.json(
            {
                "interval_s": self.sampler.interval,
                "window_s": self.sampler.window,
                "series": self.sampler.series(),
                "topics": {k: round(v, 3) for k, v in sorted(self.sampler.topic_rates().items())},
                "error": self.sampler.last_error,
            }
        )

    # -- files -----------------------------------------------------------------------------------
    async def static(self, request: Request, name: str) -> Response:
        if name not in _STATIC:
            raise HttpError(404, f"no file {name}")
        data = importlib.resources.files("odradek.console").joinpath("static", name).read_bytes()
        return Response(200, data, _STATIC[name])

    async def favicon(self, request: Request) -> Response:
        return await self.static(request, "favicon.svg")
