"""The console's topic pages: the list and the creation form, a topic's partitions, its configs
(view and edit) and its deletion (after typing its name)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from odradek.client import AlterConfigOp
from odradek.client.admin import ConfigSource
from odradek.console._html import e, form_hidden, link, q, table, url
from odradek.console._http import HttpError, Request, Response
from odradek.console._pages import Pages, num, parse_int
from odradek.errors import ErrorCode, KafkaError

__all__ = ["TopicPages"]

_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class TopicPages(Pages):
    async def topics(self, request: Request) -> Response:
        show_internal = request.query.get("internal") == "1"
        described = await self.data.topics()
        topics = {n: t for n, t in sorted(described.items()) if show_internal or not t.internal}
        tps = [(n, p.partition) for n, t in topics.items() for p in t.partitions]
        earliest, latest = await self.data.log_ranges(tps)
        rates = self.data.sampler.topic_rates()
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
                e(num(count)),
                e(num(rates[n]) if n in rates else "…"),
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
            self.page.render("Topics", content, active="/topics", notice=self.notice(request), page_id="topics")
        )

    def _create_form(self, values: Mapping[str, str]) -> str:
        return (
            '<h2>Create a topic</h2><form method="post" action="/topics" class="create" data-testid="create-topic">'
            + self.csrf()
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
            partitions = parse_int(request.arg("partitions", "-1"), "partitions")
            rf_text = request.arg("replication_factor")
            rf = parse_int(rf_text, "replication factor") if rf_text else -1
            configs: dict[str, str] = {}
            for line in request.arg("configs").splitlines():
                if not line.strip():
                    continue
                key, sep, value = line.partition("=")
                if not sep or not key.strip():
                    raise HttpError(400, f"configs take key=value lines, not {line!r}")
                configs[key.strip()] = value.strip()
            await self.data.create_topic(name, partitions, rf, configs)
        except (HttpError, KafkaError) as exc:
            message = str(exc) if isinstance(exc, HttpError) else f"{exc.code.name}: {exc.message or ''}"
            status = exc.status if isinstance(exc, HttpError) else 400
            content = self._create_form(values)
            return Response.html(
                self.page.render("Topics", content, active="/topics", error=message, page_id="topics"), status
            )
        return Response.redirect(f"/topics/{q(name)}?notice=created")

    async def topic(self, request: Request, name: str) -> Response:
        t = await self.topic_or_404(name)
        earliest, latest = await self.data.log_ranges([(name, p.partition) for p in t.partitions])
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
                e(num(lo.offset) if lo else "-"),
                e(num(hi.offset) if hi else "-"),
                e(num(count)),
            ])
        head = (
            f'<dl class="facts"><dt>Partitions</dt><dd>{len(t.partitions)}</dd>'
            f"<dt>Replication factor</dt><dd>{t.replication_factor}</dd>"
            f"<dt>Topic id</dt><dd>{e(t.topic_id or '-')}</dd>"
            f"<dt>Internal</dt><dd>{'yes' if t.internal else 'no'}</dd></dl>"
        )
        content = self.topic_tabs(name, "") + head + table(
            ["Partition", "Leader", "Replicas", "ISR", "Offline", "Log start", "Log end", "Messages"],
            rows,
            numeric=[0, 5, 6, 7],
            foot=["Total", "", "", "", "", "", "", e(num(total))],
            test_id="partitions",
        )
        return Response.html(
            self.page.render(f"Topic {name}", content, active="/topics", notice=self.notice(request), page_id="topic")
        )

    # -- configs ---------------------------------------------------------------------------------
    async def topic_configs(self, request: Request, name: str, *, error: str | None = None) -> Response:
        await self.topic_or_404(name)
        entries = await self.data.topic_configs(name)
        rows = []
        for entry in sorted(entries.values(), key=lambda c: c.name):
            value = "(sensitive)" if entry.is_sensitive else ("" if entry.value is None else entry.value)
            override = entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG
            if self.read_only or entry.read_only or entry.is_sensitive:
                cell = f"<code>{e(value)}</code>"
                action = ""
            else:
                cell = (
                    f'<form method="post" action="/topics/{e(q(name))}/configs" class="inline">{self.csrf()}'
                    + form_hidden(name=entry.name, op="set")
                    + f'<input name="value" value="{e(value)}" aria-label="{e(entry.name)}">'
                    + '<button type="submit">Save</button></form>'
                )
                action = ""
                if override:
                    action = (
                        f'<form method="post" action="/topics/{e(q(name))}/configs" class="inline">{self.csrf()}'
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
        content = self.topic_tabs(name, "/configs") + table(
            ["Config", "Value", "Source", ""], rows, cls="grid configs", test_id="configs"
        )
        return Response.html(
            self.page.render(
                f"Topic {name}: configs",
                content,
                active="/topics",
                notice=self.notice(request),
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
            await self.data.alter_topic_config(name, change)
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
        t = await self.topic_or_404(name)
        content = (
            self.topic_tabs(name, "/delete")
            + f'<div class="danger-zone"><p>Deleting <strong>{e(name)}</strong> removes its {len(t.partitions)} '
            "partition(s) and every record in them. Consumers and producers of it will fail. "
            "This cannot be undone.</p>"
            f'<form method="post" action="/topics/{e(q(name))}/delete" data-testid="confirm-delete">{self.csrf()}'
            "<label>Type the topic name to confirm "
            f'<input name="confirm" autocomplete="off" required aria-label="topic name"></label>'
            '<button type="submit" class="danger">Delete topic</button> '
            f"{link(f'/topics/{q(name)}', 'Cancel')}</form></div>"
        )
        return Response.html(self.page.render(f"Delete topic {name}?", content, active="/topics", page_id="delete"))

    async def delete_topic(self, request: Request, name: str) -> Response:
        if request.form.get("confirm", "").strip() != name:
            raise HttpError(400, "the name typed does not match the topic: nothing was deleted")
        await self.data.delete_topic(name)
        return Response.redirect("/topics?notice=deleted")
