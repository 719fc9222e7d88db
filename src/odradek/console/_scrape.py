"""The brokers' ``/metrics``, read for the console's brokers page (:mod:`._brokers`): where the
console can read a broker's ``/metrics`` (``odradek console --metrics-url``, one per broker;
default http://127.0.0.1:9404/metrics, a single-node broker's default), its bytes in and out per
second (produced; sent to consumers and to followers), requests per second, and its partitions,
leaderships and under-replicated partitions.  A broker's ``kafka_server_app_info{id}`` says whose
endpoint a URL is.  The scrapes run on a thread (the console's loop never waits on a socket) every
sample interval; rates are the counters' growth between the last two scrapes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import urllib.request
from dataclasses import dataclass, field

__all__ = ["BrokerStats", "MetricsScraper", "parse_metrics", "parse_table_lag"]

log = logging.getLogger("odradek.console")

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
#: counters summed over their labels: name in the page -> metric families
COUNTERS = {
    "bytes_in": ("kafka_server_brokertopicmetrics_bytesin_total",),
    "bytes_out": ("kafka_server_brokertopicmetrics_bytesout_total",
                  "kafka_server_brokertopicmetrics_replicationbytesout_total"),
    "requests": ("kafka_network_requestmetrics_requests_total",),
}
GAUGES = {
    "partitions": "kafka_server_replicamanager_partitioncount",
    "leaders": "kafka_server_replicamanager_leadercount",
    "under_replicated": "kafka_server_replicamanager_underreplicatedpartitions",
}
MAX_BYTES = 8 * 1024 * 1024  # a scrape larger than this is not read further


def parse_metrics(text: str) -> tuple[int | None, dict[str, float]]:
    """The broker id (``kafka_server_app_info{id}``) and the summed counters and gauges of a
    Prometheus text page; lines that are not samples are skipped."""
    wanted = {n: k for k, names in COUNTERS.items() for n in names} | {v: k for k, v in GAUGES.items()}
    totals: dict[str, float] = {}
    broker_id: int | None = None
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        name = m.group(1)
        if name == "kafka_server_app_info":
            labels = dict(_LABEL.findall(m.group(3) or ""))
            with contextlib.suppress(ValueError):
                broker_id = int(labels.get("id", ""))
            continue
        key = wanted.get(name)
        if key is None:
            continue
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        totals[key] = totals.get(key, 0.0) + value
    return broker_id, totals


_TABLE_LAG = {"odradek_iceberg_writer_lag_records": "records", "odradek_iceberg_writer_lag_seconds": "seconds"}


def parse_table_lag(text: str) -> dict[tuple[str, int], dict[str, float]]:
    """The Iceberg writers' lag on a Prometheus text page: ``{(topic, partition): {"records",
    "seconds"}}``; lines that are not well-formed samples are skipped."""
    out: dict[tuple[str, int], dict[str, float]] = {}
    for line in text.splitlines():
        if not line.startswith("odradek_iceberg_writer_lag_"):
            continue
        m = _LINE.match(line)
        if m is None or m.group(1) not in _TABLE_LAG:
            continue
        labels = dict(_LABEL.findall(m.group(3) or ""))
        try:
            key = (labels["topic"], int(labels["partition"]))
            value = float(m.group(4))
        except (KeyError, ValueError):
            continue
        out.setdefault(key, {})[_TABLE_LAG[m.group(1)]] = value
    return out


@dataclass(slots=True)
class BrokerStats:
    """One endpoint's last scrape: the broker id it names, the gauges, per-second rates of the
    counters (None until two scrapes), and the error of the last scrape."""

    url: str
    broker_id: int | None = None
    values: dict[str, float] = field(default_factory=dict)
    rates: dict[str, float | None] = field(default_factory=dict)
    at: float = 0.0
    error: str | None = None
    #: the Iceberg writers' lag this broker reports (topic, partition) -> records / seconds
    table_lag: dict[tuple[str, int], dict[str, float]] = field(default_factory=dict)


class MetricsScraper:
    """Scrapes each ``/metrics`` URL every ``interval`` seconds on a thread."""

    def __init__(self, urls: list[str], *, interval: float, timeout: float) -> None:
        self.stats = {u: BrokerStats(u) for u in urls}
        self.interval = interval
        self.timeout = timeout
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.stats and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="console-metrics")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _get(self, url: str) -> str:
        with urllib.request.urlopen(url, timeout=self.timeout) as resp:
            return str(resp.read(MAX_BYTES).decode("utf-8", "replace"))

    async def scrape(self) -> None:
        for url, st in self.stats.items():
            try:
                text = await asyncio.to_thread(self._get, url)
            except Exception as exc:  # the page says so; the next scrape tries again
                st.error = f"{type(exc).__name__}: {exc}"
                continue
            now = time.monotonic()
            broker_id, values = parse_metrics(text)
            dt = now - st.at if st.at else 0.0
            st.rates = {
                k: ((values.get(k, 0.0) - st.values.get(k, 0.0)) / dt if dt > 0 and k in st.values else None)
                for k in COUNTERS
            }
            st.broker_id, st.values, st.at, st.error = broker_id, values, now, None
            st.table_lag = parse_table_lag(text)

    async def _run(self) -> None:
        for _ in iter(int, 1):  # until cancelled by close()
            await self.scrape()
            await asyncio.sleep(self.interval)

    def by_broker(self) -> dict[int, BrokerStats]:
        return {s.broker_id: s for s in self.stats.values() if s.broker_id is not None}
