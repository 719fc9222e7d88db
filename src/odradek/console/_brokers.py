"""The console's brokers page: every broker (DescribeCluster) with its rates, partitions and
leaderships from its ``/metrics`` (:mod:`._scrape`)."""

from __future__ import annotations

from odradek.console._html import e, table
from odradek.console._http import Request, Response
from odradek.console._pages import Pages, num

__all__ = ["BrokerPages"]


def _rate(x: float | None) -> str:
    return "-" if x is None else num(round(x, 1))


class BrokerPages(Pages):
    async def brokers(self, request: Request) -> Response:
        cluster = await self.data.admin.describe_cluster(timeout=self.data.timeout)
        scraper = self.data.scraper
        stats = scraper.by_broker()
        rows = []
        for b in sorted(cluster.brokers, key=lambda n: n.id):
            st = stats.get(b.id)
            r = st.rates if st is not None else {}
            v = st.values if st is not None else {}
            rows.append([
                e(b.id) + (" (controller)" if cluster.controller_id == b.id else ""),
                e(f"{b.host}:{b.port}"), e(b.rack or "-"),
                e(_rate(r.get("bytes_in"))), e(_rate(r.get("bytes_out"))), e(_rate(r.get("requests"))),
                e(num(int(v["partitions"])) if "partitions" in v else "-"),
                e(num(int(v["leaders"])) if "leaders" in v else "-"),
                e(num(int(v["under_replicated"])) if "under_replicated" in v else "-"),
            ])
        content = table(
            ["Broker", "Address", "Rack", "Bytes in/s", "Bytes out/s", "Requests/s", "Partitions", "Leaders",
             "Under-replicated"],
            rows, numeric=[3, 4, 5, 6, 7, 8], empty="no brokers", test_id="brokers",
        )
        unread = [s for s in scraper.stats.values() if s.error is not None or s.broker_id is None]
        notes = "".join(
            f"<li><code>{e(s.url)}</code>: {e(s.error or 'not read yet, or no kafka_server_app_info')}</li>"
            for s in unread
        )
        content += (
            '<p class="muted">Rates from each broker\'s <code>/metrics</code> (<code>odradek console '
            "--metrics-url</code>), over the last sample interval; bytes out include replication to followers.</p>"
            + (f'<ul class="muted" data-testid="metrics-unread">{notes}</ul>' if notes else "")
        )
        return Response.html(self.page.render("Brokers", content, active="/brokers", page_id="brokers"))

    async def tables(self, request: Request) -> Response:
        """Topics written to Iceberg tables: each partition's writer lag, as its leader reports it."""
        rows = []
        for st in sorted(self.data.scraper.stats.values(), key=lambda s: (s.broker_id is None, s.broker_id or 0)):
            for (topic, partition), lag in sorted(st.table_lag.items()):
                rows.append([e(topic), e(partition), e("-" if st.broker_id is None else st.broker_id),
                             e(num(int(lag.get("records", 0)))), e(num(round(lag.get("seconds", 0.0), 1)))])
        content = table(["Topic", "Partition", "Writer (leader)", "Records behind", "Seconds behind"], rows,
                        numeric=[1, 3, 4], empty="no topic is written to an Iceberg table (or no /metrics read)",
                        test_id="tables")
        content += ('<p class="muted">From each broker\'s <code>odradek_iceberg_writer_lag_records</code> and '
                    "<code>_seconds</code>; <code>odradek tables describe</code> shows the tables themselves.</p>")
        return Response.html(self.page.render("Iceberg tables", content, active="/tables", page_id="tables"))
