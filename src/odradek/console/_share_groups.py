"""The console's share group pages (KIP-932), read-only: the list with each group's state, members
and total lag, and a group's members and, per share-partition, its start offset and lag.  (The
in-flight records of a share-partition are known only to its leader: its /metrics shows them.)"""

from __future__ import annotations

from odradek.console._html import e, link, q, table
from odradek.console._http import HttpError, Request, Response
from odradek.console._pages import Pages, num

__all__ = ["SharePages"]


class SharePages(Pages):
    async def share_groups(self, request: Request) -> Response:
        described, lags = await self.data.share_groups()
        rows = []
        for gid, g in described.items():
            lag = lags.get(gid)
            total = "?" if isinstance(lag, BaseException) or lag is None else num(
                sum(o.lag for o in lag.values() if o.lag >= 0))
            rows.append([
                link(f"/share-groups/{q(gid)}", gid), e(g.state), e(len(g.members)),
                e(", ".join(sorted({t for m in g.members for t in m.subscribed_topics})) or "-"), e(total),
            ])
        content = table(["Group", "State", "Members", "Topics", "Total lag"], rows, numeric=[2, 4],
                        empty="no share groups", test_id="share-groups")
        return Response.html(self.page.render("Share groups", content, active="/share-groups", page_id="share-groups"))

    async def share_group(self, request: Request, group_id: str) -> Response:
        found = await self.data.share_group(group_id)
        if found is None:
            raise HttpError(404, f"share group {group_id!r} does not exist")
        g, offsets = found
        facts = (
            f'<dl class="facts"><dt>State</dt><dd data-testid="share-group-state">{e(g.state)}</dd>'
            f"<dt>Group epoch</dt><dd>{e(g.group_epoch)}</dd>"
            f"<dt>Assignor</dt><dd>{e(g.assignor)}</dd>"
            f"<dt>Coordinator</dt><dd>{e(g.coordinator.id if g.coordinator else '-')}</dd></dl>"
        )
        members = table(
            ["Member", "Client id", "Host", "Assigned partitions"],
            [[f"<code>{e(m.member_id)}</code>", e(m.client_id), e(m.host),
              e(", ".join(f"{t}-{p}" for t, p in sorted(m.assignment)) or "-")]
             for m in sorted(g.members, key=lambda m: m.member_id)],
            empty="no members", test_id="share-members",
        )
        rows = [[link(f"/topics/{q(t)}", t), e(p), e(num(o.start_offset)), e("-" if o.lag < 0 else num(o.lag))]
                for (t, p), o in sorted(offsets.items())]
        offsets_table = table(["Topic", "Partition", "Start offset", "Lag"], rows, numeric=[1, 2, 3],
                              empty="no share-partition state", test_id="share-offsets")
        content = (facts + "<h2>Members</h2>" + members + "<h2>Share-partitions</h2>" + offsets_table
                   + '<p class="muted">In-flight records (acquired, available again) are known only to each '
                   "partition's leader: see its /metrics (kafka_server_share_partition_metrics_*).</p>")
        return Response.html(self.page.render(f"Share group {group_id}", content, active="/share-groups",
                                              page_id="share-group"))
