"""``odradek console``: the web console for any Kafka-protocol broker or cluster, until SIGTERM / SIGINT.

    odradek console --bootstrap-server broker:9092 --port 9021 --read-only
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Add the ``odradek console`` subcommand (the web console: topics, partitions, messages, groups and lag,
    schemas, throughput) and its options to the top-level subparsers ``sub``."""
    p = sub.add_parser(
        "console",
        help="serve the web console (topics, partitions, messages, groups and lag, schemas, throughput)",
        description="Serve a web console for a Kafka-protocol cluster: overview, topics, partitions, a message "
        "browser, consumer groups with lag and offset resets, and a throughput chart.",
    )
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092", help="host:port[,host:port] (default 127.0.0.1:9092)")
    p.add_argument("--host", default="127.0.0.1", help="address to serve the console on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=9021, help="HTTP port (default 9021; 0 picks a free port)")
    p.add_argument("--read-only", action="store_true", help="hide and refuse (HTTP 403) every change")
    p.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for each cluster operation (default 15)")
    p.add_argument(
        "--sample-interval", type=float, default=5.0, help="seconds between throughput samples (default 5)"
    )
    p.add_argument(
        "--command-config",
        metavar="FILE",
        help="client configs (security.protocol, ssl.*, sasl.*...) in a properties file, as Kafka's tools take",
    )
    p.add_argument(
        "--schema-registry-url", metavar="URL", default=None,
        help="the schema registry the Schemas page reads (default $SCHEMA_REGISTRY_URL, else http://127.0.0.1:8081)",
    )
    p.add_argument(
        "--metrics-url", metavar="URL", action="append", default=None,
        help="a broker's /metrics, for the Brokers page's rates (repeat for each broker; default "
        "http://127.0.0.1:9404/metrics, a single-node broker's; 'none': no scraping)",
    )
    p.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")


async def _serve(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from odradek.console import ConsoleServer

    server = ConsoleServer(
        config,
        host=args.host,
        port=args.port,
        read_only=args.read_only,
        timeout=args.timeout,
        sample_interval=args.sample_interval,
        schema_registry_url=args.schema_registry_url or os.environ.get("SCHEMA_REGISTRY_URL") or "http://127.0.0.1:8081",
        metrics_urls=[u for u in (args.metrics_url or ["http://127.0.0.1:9404/metrics"]) if u != "none"],
    )
    try:
        await server.start()
    except OSError as exc:
        await server.close()
        print(f"odradek console: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    mode = " (read-only)" if args.read_only else ""
    print(f"odradek console{mode} for {args.bootstrap_server} at {server.url}", flush=True)
    try:
        await stop.wait()
    finally:
        await server.close()
    return 0


def run(args: argparse.Namespace) -> int:
    """Run ``odradek console`` for the parsed ``args``; serves until interrupted; returns the exit status (2
    for bad options, 1 when it cannot start)."""
    from odradek.cli.serve import configure_logging
    from odradek.cli.topics import command_config

    if args.sample_interval <= 0 or args.timeout <= 0:
        print("odradek console: --sample-interval and --timeout must be positive", file=sys.stderr)
        return 2
    configure_logging(args.log_level)
    try:
        config = {**command_config(args), "bootstrap.servers": args.bootstrap_server}
    except ValueError as exc:
        print(f"odradek console: {exc}", file=sys.stderr)
        return 1
    return asyncio.run(_serve(args, config))
