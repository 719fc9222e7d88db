"""The console's consumer group pages: the list with each group's lag, a group's members and
lag per partition, and the reset of its offsets (with a dry-run preview; only an inactive group)."""

from __future__ import annotations

from collections.abc import Mapping

from odradek.console._html import e, link, q, table
from odradek.console._http import HttpError, Request, Response
from odradek.console._pages import Pages, num, parse_int, parse_time

__all__ = ["RESET_STRATEGIES", "GroupPages"]

RESET_STRATEGIES = ("earliest", "latest", "offset", "timestamp", "shift")


class GroupPages(Pages):
    async def groups(self, request: Request) -> Response:
        ids = (await self.data.groups())[:200]
        described, lags = await self.data.group_summaries(ids)
        rows = []
        for gid, lag in zip(ids, lags):
            g = described.get(gid)
            total = "?" if isinstance(lag, BaseException) else num(sum(x.lag or 0 for x in lag.values()))
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
        g, lags, topics = await self.data.group(group_id)
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
                e(num(lag.committed_offset)),
                e(num(lag.log_end_offset)),
                e(num(lag.lag)),
                e(lag.member.client_id if lag.member else "-"),
            ])
        lag_table = table(
            ["Topic", "Partition", "Committed", "Log end", "Lag", "Consumer"],
            rows,
            numeric=[1, 2, 3, 4],
            foot=["Total", "", "", "", f'<span data-testid="total-lag">{e(num(total))}</span>', ""],
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
            f'<form method="post" action="/groups/{e(q(group_id))}/reset" class="reset" data-testid="reset">{self.csrf()}'
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
        t = await self.topic_or_404(topic)
        all_parts = sorted(p.partition for p in t.partitions)
        spec = request.arg("partitions")
        if spec and spec != "all":
            parts = sorted({parse_int(x.strip(), "partition", minimum=0) for x in spec.split(",") if x.strip()})
            missing = [p for p in parts if p not in all_parts]
            if missing:
                raise HttpError(400, f"topic {topic!r} has no partition {missing[0]}")
        else:
            parts = all_parts
        tps = [(topic, p) for p in parts]
        number: int | None = None
        if strategy == "offset":
            number = parse_int(value, "offset", minimum=0)
        elif strategy == "timestamp":
            number = parse_time(value)
        elif strategy == "shift":
            number = parse_int(value, "shift")
        plan = await self.data.reset_plan(group_id, tps, strategy, number)
        committed, target, latest, state = plan.committed, plan.target, plan.latest, plan.state
        rows = [
            [
                e(tp[1]),
                e(num(committed[tp].offset) if tp in committed else "-"),
                e(num(target[tp])),
                e(num(latest[tp].offset - target[tp])),
            ]
            for tp in tps
        ]
        error = None
        if execute and state not in ("Empty", "Dead"):
            error = f"the group is {state}: stop its consumers first (only an inactive group's offsets can be reset)"
            execute = False
        if execute:
            await self.data.reset(group_id, target)
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
