"""The console's message browser: a topic's records by partition and offset or time, shown as
JSON, text or hex, with a search filter over keys, values and headers."""

from __future__ import annotations

import asyncio

from odradek.console._data import Start
from odradek.console._html import e, q, table
from odradek.console._http import HttpError, Request, Response
from odradek.console._pages import Pages, ms_text, parse_int, parse_time
from odradek.console._render import FORMATS, header_text, render

__all__ = ["MAX_LIMIT", "MessageBrowser"]

#: records shown at most
MAX_LIMIT = 500


class MessageBrowser(Pages):
    async def messages(self, request: Request, name: str) -> Response:
        t = await self.topic_or_404(name)
        parts = sorted(p.partition for p in t.partitions)
        part_text = request.arg("partition", "0" if len(parts) == 1 else "all")
        position = request.arg("position", "earliest")
        if position not in ("earliest", "latest", "offset", "timestamp"):
            raise HttpError(400, f"unknown position {position!r}")
        value = request.arg("offset") if position == "offset" else request.arg("timestamp")
        limit = min(parse_int(request.arg("limit", "50"), "limit", minimum=1), MAX_LIMIT)
        fmt = request.arg("format", "auto")
        if fmt not in FORMATS:
            raise HttpError(400, f"unknown format {fmt!r}")
        needle = request.arg("q")
        if part_text == "all":
            if position == "offset":
                raise HttpError(400, "an offset needs one partition: choose a partition")
            chosen = parts
        else:
            p = parse_int(part_text, "partition", minimum=0)
            if p not in parts:
                raise HttpError(404, f"topic {name!r} has no partition {p}")
            chosen = [p]
        if position == "timestamp" and not value:
            raise HttpError(400, "give a timestamp (ISO 8601 or ms since the epoch)")
        start_at: Start
        if position == "offset":
            start_at = ("offset", parse_int(value or "0", "offset", minimum=0))
        elif position == "timestamp":
            start_at = ("timestamp", parse_time(value))
        elif position == "latest":
            start_at = ("latest", None)
        else:
            start_at = ("earliest", None)
        results = await asyncio.gather(*(self.data.browse(name, p, start_at, limit, needle) for p in chosen))
        records = [r for res in results for r in res.records]
        if len(chosen) > 1:
            records.sort(key=lambda r: (r.timestamp, r.partition, r.offset))
            if position == "latest":
                records = records[-limit:]
            else:
                records = records[:limit]
        scanned = sum(res.scanned for res in results)
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
                f'<span class="ts">{e(ms_text(r.timestamp))}</span>',
                f'<pre class="{e(key_kind.split("+")[0])}" data-kind="{e(key_kind)}">{e(key_text)}</pre>',
                f'<pre class="{e(val_kind.split("+")[0])}" data-kind="{e(val_kind)}">{e(val_text)}</pre>',
                headers or '<span class="muted">-</span>',
            ])
        ranges = ", ".join(f"p{p}: {res.log_start} to {res.log_end}" for p, res in zip(chosen, results))
        summary = (
            f'<p class="summary" data-testid="browse-summary">{len(records)} record(s) shown'
            + (f", {scanned} scanned for “{e(needle)}”" if needle else "")
            + f". Offsets {e(ranges)}.</p>"
        )
        content = (
            self.topic_tabs(name, "/messages")
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
