"""The console's application: the routes from a path to a page, and the guards around them
(loopback-only Host names, POST only with this console's CSRF token from a same-origin page,
read-only mode), the error pages and the static files.  The pages are in ``_overview``,
``_topics``, ``_browser``, ``_groups``, ``_share_groups``, ``_schemas`` and ``_security``; what they ask the cluster in ``_data``."""

from __future__ import annotations

import hmac
import importlib.resources
import logging
import re
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from odradek import __version__
from odradek.console._brokers import BrokerPages
from odradek.console._browser import MessageBrowser
from odradek.console._data import ClusterData
from odradek.console._groups import GroupPages
from odradek.console._html import Page, link
from odradek.console._http import HttpError, Request, Response
from odradek.console._overview import OverviewPages
from odradek.console._pages import Pages
from odradek.console._replicas import ReplicaPages
from odradek.console._schemas import RegistryReader, SchemaPages
from odradek.console._security import SecurityPages
from odradek.console._share_groups import SharePages
from odradek.console._topics import TopicPages
from odradek.errors import ErrorCode, KafkaError, OdradekError

__all__ = ["ConsoleApp"]

log = logging.getLogger("odradek.console")

_STATIC = {
    "console.css": "text/css; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
_P = TypeVar("_P", bound=Pages)
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def _host_name(host: str) -> str:
    """The name in a Host header, without the port (and the brackets of an IPv6 address)."""
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0].lower()


class ConsoleApp:
    """The pages, over one :class:`~odradek.client.AsyncAdmin` and one
    :class:`~odradek.client.AsyncSimpleConsumer` (see :class:`~odradek.console._data.ClusterData`)."""

    def __init__(
        self,
        client_config: Mapping[str, Any],
        *,
        read_only: bool = False,
        timeout: float = 15.0,
        sample_interval: float = 5.0,
        loopback_only: bool = False,
        schema_registry_url: str = "http://127.0.0.1:8081",
        metrics_urls: list[str] | None = None,
    ) -> None:
        cfg = dict(client_config)
        #: served on a loopback address: only loopback names in the Host header (no DNS rebinding)
        self.loopback_only = loopback_only
        cfg.setdefault("client.id", "odradek-console")
        self.bootstrap = str(cfg["bootstrap.servers"])
        self.read_only = read_only
        self.timeout = timeout
        self.data = ClusterData(cfg, timeout=timeout, sample_interval=sample_interval, metrics_urls=metrics_urls)
        self.csrf_token = secrets.token_urlsafe(32)
        self.page = Page(bootstrap=self.bootstrap, read_only=read_only, version=__version__)

        def pages(cls: type[_P]) -> _P:
            return cls(self.data, self.page, read_only=read_only, csrf_token=self.csrf_token, bootstrap=self.bootstrap)

        overview, topics, browser, groups = pages(OverviewPages), pages(TopicPages), pages(MessageBrowser), pages(GroupPages)
        shares, security, brokers = pages(SharePages), pages(SecurityPages), pages(BrokerPages)
        replicas = pages(ReplicaPages)
        schemas = SchemaPages(self.data, self.page, read_only=read_only, csrf_token=self.csrf_token,
                              bootstrap=self.bootstrap, registry=RegistryReader(schema_registry_url, timeout))
        self._routes: list[tuple[str, re.Pattern[str], Callable[..., Awaitable[Response]]]] = [
            ("GET", re.compile(r"/"), overview.overview),
            ("GET", re.compile(r"/topics"), topics.topics),
            ("POST", re.compile(r"/topics"), topics.create_topic),
            ("GET", re.compile(r"/topics/([^/]+)"), topics.topic),
            ("GET", re.compile(r"/topics/([^/]+)/messages"), browser.messages),
            ("GET", re.compile(r"/topics/([^/]+)/configs"), topics.topic_configs),
            ("POST", re.compile(r"/topics/([^/]+)/configs"), topics.alter_topic_config),
            ("GET", re.compile(r"/topics/([^/]+)/delete"), topics.confirm_delete),
            ("POST", re.compile(r"/topics/([^/]+)/delete"), topics.delete_topic),
            ("GET", re.compile(r"/groups"), groups.groups),
            ("GET", re.compile(r"/groups/([^/]+)"), groups.group),
            ("POST", re.compile(r"/groups/([^/]+)/reset"), groups.reset_offsets),
            ("GET", re.compile(r"/share-groups"), shares.share_groups),
            ("GET", re.compile(r"/share-groups/([^/]+)"), shares.share_group),
            ("GET", re.compile(r"/schemas"), schemas.schemas),
            ("GET", re.compile(r"/schemas/([^/]+)"), schemas.subject),
            ("GET", re.compile(r"/brokers"), brokers.brokers),
            ("GET", re.compile(r"/tables"), brokers.tables),
            ("GET", re.compile(r"/reassignments"), replicas.reassignments),
            ("GET", re.compile(r"/log-dirs"), replicas.log_dirs),
            ("GET", re.compile(r"/acls"), security.acls),
            ("POST", re.compile(r"/acls/delete"), security.delete_acl),
            ("GET", re.compile(r"/users"), security.users),
            ("POST", re.compile(r"/users/delete"), security.delete_credential),
            ("GET", re.compile(r"/quotas"), security.quotas),
            ("POST", re.compile(r"/quotas/delete"), security.delete_quota),
            ("GET", re.compile(r"/throughput"), overview.throughput),
            ("GET", re.compile(r"/api/throughput"), overview.api_throughput),
            ("GET", re.compile(r"/api/overview"), overview.api_overview),
            ("GET", re.compile(r"/static/([a-z.]+)"), self.static),
            ("GET", re.compile(r"/favicon\.ico"), self.favicon),
        ]

    async def start(self) -> None:
        self.data.sampler.start()
        self.data.scraper.start()

    async def close(self) -> None:
        await self.data.close()

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

    # -- files -----------------------------------------------------------------------------------
    async def static(self, request: Request, name: str) -> Response:
        if name not in _STATIC:
            raise HttpError(404, f"no file {name}")
        data = importlib.resources.files("odradek.console").joinpath("static", name).read_bytes()
        return Response(200, data, _STATIC[name])

    async def favicon(self, request: Request) -> Response:
        return await self.static(request, "favicon.svg")
