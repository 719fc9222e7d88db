"""The console's replica pages: reassignments in progress (ListPartitionReassignments) with each
one's progress — the bytes its new replicas hold of the leader's, from DescribeLogDirs, as
``odradek reassign verify`` reports it — and every broker's log dirs with their replicas (sizes,
offset lags, future replicas being moved into a dir).  Read-only: moves are started with
``odradek reassign`` / ``odradek log-dirs move``."""

from __future__ import annotations

from odradek.client import AdminError
from odradek.console._html import e, link, q, table
from odradek.console._http import Request, Response
from odradek.console._pages import Pages, num

__all__ = ["ReplicaPages"]


class ReplicaPages(Pages):
    async def reassignments(self, request: Request) -> Response:
        admin, timeout = self.data.admin, self.data.timeout
        ongoing = await admin.list_partition_reassignments(timeout=timeout)
        leaders: dict[tuple[str, int], int] = {}
        if ongoing:
            described = await admin.describe_topics(sorted({t for t, _ in ongoing}), timeout=timeout)
            leaders = {(n, p.partition): p.leader for n, d in described.items() for p in d.partitions}
        sizes: dict[tuple[int, tuple[str, int]], int] = {}
        brokers = sorted({b for r in ongoing.values() for b in r.adding_replicas} | {b for b in leaders.values() if b >= 0})
        if brokers:
            try:
                dirs = await admin.describe_log_dirs(brokers, list(ongoing), timeout=timeout)
            except AdminError as exc:  # a broker that cannot say: nothing copied there yet
                dirs = exc.results
            for broker, by_path in dirs.items():
                for d in by_path.values():
                    for tp, info in d.replicas.items():
                        if not info.is_future:
                            sizes[(broker, tp)] = max(sizes.get((broker, tp), 0), info.size)
        rows = []
        total_moved = total_bytes = 0
        for tp, r in sorted(ongoing.items()):
            whole = sizes.get((leaders.get(tp, -1), tp), 0)
            moved = sum(min(sizes.get((b, tp), 0), whole) for b in r.adding_replicas)
            want = whole * len(r.adding_replicas)
            total_moved, total_bytes = total_moved + moved, total_bytes + want
            pct = "-" if not want else f"{100.0 * moved / want:.1f} %"
            rows.append([
                link(f"/topics/{q(tp[0])}", tp[0]), e(tp[1]), e(",".join(map(str, r.replicas))),
                e(",".join(map(str, r.adding_replicas)) or "-"), e(",".join(map(str, r.removing_replicas)) or "-"),
                e(num(moved)), e(num(want)), e(pct),
            ])
        content = table(
            ["Topic", "Partition", "Replicas", "Adding", "Removing", "Bytes copied", "Bytes to copy", "Progress"],
            rows, numeric=[1, 5, 6, 7], empty="no reassignment in progress", test_id="reassignments",
            foot=None if not rows else ["", "", "", "", "total", e(num(total_moved)), e(num(total_bytes)),
                                        e("-" if not total_bytes else f"{100.0 * total_moved / total_bytes:.1f} %")],
        )
        content += ('<p class="muted">Start, verify and cancel moves with <code>odradek reassign</code> '
                    "(kafka-reassign-partitions' JSON, <code>--throttle</code>).</p>")
        return Response.html(self.page.render("Reassignments", content, active="/reassignments",
                                              page_id="reassignments"))

    async def log_dirs(self, request: Request) -> Response:
        described = await self.data.admin.describe_log_dirs(timeout=self.data.timeout)
        rows = []
        for broker, dirs in sorted(described.items()):
            for path, d in sorted(dirs.items()):
                state = "online" if d.error is None else d.error.code.name
                free = "-" if d.usable_bytes is None else num(d.usable_bytes)
                size = sum(i.size for i in d.replicas.values() if not i.is_future)
                future = [f"{t}-{p}" for (t, p), i in sorted(d.replicas.items()) if i.is_future]
                rows.append([e(broker), f"<code>{e(path)}</code>", e(state), e(len(d.replicas) - len(future)),
                             e(num(size)), e(free), e(", ".join(future) or "-")])
        content = table(
            ["Broker", "Log dir", "State", "Replicas", "Bytes", "Usable bytes", "Being moved here"],
            rows, numeric=[3, 4, 5], empty="no log dirs", test_id="log-dirs",
        )
        return Response.html(self.page.render("Log dirs", content, active="/log-dirs", page_id="log-dirs"))
