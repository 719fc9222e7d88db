"""The web console: ``odradek console --bootstrap-server HOST:PORT`` serves pages about any
Kafka-protocol cluster, built on Odradek's own clients (:class:`~odradek.client.AsyncAdmin` for
metadata, configs, offsets and groups; :class:`~odradek.client.AsyncSimpleConsumer` for the
message browser).

Pages: overview (brokers, controller, cluster id, partition counts, under-replicated and offline
partitions), topics (list, create, configs view and edit, delete after typing the name), a
topic's partitions (leader, replicas, ISR, log start and end), a message browser (by partition
and offset or time; JSON, text or hex; a search filter), consumer groups (state, members,
lag per partition with totals, offset reset with a dry-run preview), schemas (the schema
registry's subjects, their versions and schemas, and the topics that use them; the registry at
``schema_registry_url``) and a throughput chart (messages in per second over the last 15
minutes, sampled from log end offsets).

Server-rendered HTML on a small asyncio HTTP server; the CSS and the chart's script are package
data.  Every change is a POST carrying the console's CSRF token from a same-origin page;
``read_only=True`` hides the forms and answers every POST with 403::

    server = ConsoleServer({"bootstrap.servers": "127.0.0.1:9092"}, port=9021, read_only=True)
    await server.start()
    ...
    await server.close()
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from odradek.console._app import ConsoleApp
from odradek.console._http import HttpServer

__all__ = ["ConsoleServer"]


class ConsoleServer:
    """The console's app on an HTTP server; ``port`` 0 picks a free port (see :attr:`port`)."""

    def __init__(
        self,
        client_config: Mapping[str, Any],
        *,
        host: str = "127.0.0.1",
        port: int = 9021,
        read_only: bool = False,
        timeout: float = 15.0,
        sample_interval: float = 5.0,
        schema_registry_url: str = "http://127.0.0.1:8081",
        metrics_urls: list[str] | None = None,
    ) -> None:
        self.app = ConsoleApp(
            client_config,
            read_only=read_only,
            timeout=timeout,
            sample_interval=sample_interval,
            loopback_only=host in ("127.0.0.1", "localhost", "::1"),
            schema_registry_url=schema_registry_url,
            metrics_urls=metrics_urls,
        )
        self.http = HttpServer(self.app, host, port)

    @property
    def port(self) -> int:
        return self.http.port

    @property
    def url(self) -> str:
        host = self.http.host
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.port}/"

    async def start(self) -> None:
        await self.http.start()
        await self.app.start()

    async def close(self) -> None:
        await self.http.close()
        await self.app.close()
