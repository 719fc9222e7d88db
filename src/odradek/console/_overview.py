"""The console's overview (brokers, controller, partition counts) and throughput pages, and their
JSON endpoints."""

from __future__ import annotations

from odradek.console._html import e, table
from odradek.console._http import Request, Response
from odradek.console._pages import Pages, num

__all__ = ["OverviewPages"]


class OverviewPages(Pages):
    async def api_overview(self, request: Request) -> Response:
        data = await self.data.overview()
        data["leaders"] = {str(k): v for k, v in data["leaders"].items()}
        return Response.json(data)

    async def overview(self, request: Request) -> Response:
        d = await self.data.overview()
        series = self.data.sampler.series()
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
            stat("messages in /s", num(rate) if rate is not None else "…", "stat-rate"),
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

    async def throughput(self, request: Request) -> Response:
        content = (
            '<p class="muted">Messages in per second across all topics, from the growth of the partitions\' '
            f"log end offsets sampled every {e(num(self.data.sampler.interval))} s by this console; the last 15 minutes.</p>"
            '<div id="chart" class="chart" data-testid="chart" data-src="/api/throughput">'
            '<p class="muted">waiting for samples…</p></div>'
            '<p class="legend"><span id="chart-now">…</span></p>'
        )
        return Response.html(self.page.render("Throughput", content, active="/throughput", page_id="throughput"))

    async def api_throughput(self, request: Request) -> Response:
        sampler = self.data.sampler
        return Response.json(
            {
                "interval_s": sampler.interval,
                "window_s": sampler.window,
                "series": sampler.series(),
                "topics": {k: round(v, 3) for k, v in sorted(sampler.topic_rates().items())},
                "error": sampler.last_error,
            }
        )
