"""``odradek serve``: run a broker until SIGTERM / SIGINT, then shut down cleanly."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Add the ``odradek serve`` subcommand (run a broker) and its options to the top-level subparsers
    ``sub``."""
    p = sub.add_parser(
        "serve",
        help="run a broker (default: 127.0.0.1:9092, data in ./odradek-data, no ZooKeeper)",
        description="Run an Odradek broker. Configuration uses Kafka's broker config names: a "
        "server.properties file (--config), ODRADEK_* environment variables (ODRADEK_LOG_DIRS for "
        "log.dirs), --override key=value, then the short flags, each overriding the previous. "
        "Every broker config Kafka defines is accepted; those Odradek does not act on (accepted, not "
        "used by Odradek: docs/configuration.md) are named in one WARN line at start-up. A name that "
        "is none of them stops the start, naming the nearest valid one.",
    )
    p.add_argument("--config", "-c", metavar="FILE", help="a server.properties file")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="set a broker config")
    p.add_argument("--host", help="listener host (listeners=PLAINTEXT://HOST:PORT)")
    p.add_argument("--port", type=int, help="listener port")
    p.add_argument("--data-dir", help="log.dirs")
    p.add_argument("--broker-id", type=int, help="broker.id")
    p.add_argument(
        "--zookeeper", metavar="HOST:PORT[/CHROOT]", help="zookeeper.connect: join a cluster coordinated by ZooKeeper"
    )
    p.add_argument(
        "--metrics-port", type=int, metavar="N",
        help="metrics.port: serve Prometheus /metrics on 127.0.0.1:N (metrics.host); 0 picks a free port, -1 turns "
        "metrics off (default: 9404 without ZooKeeper, off in a cluster)",
    )
    # test brokers only (the pytest plugin, odradek.testing.BrokerProcess(test_mode=True)): fault
    # scripting and its loopback control endpoint; not shown in --help
    p.add_argument("--test-mode", action="store_true", help=argparse.SUPPRESS)
    p.add_argument(
        "--log-level", default="INFO",
        help="logging level (default INFO); LEVEL,logger=LEVEL,... sets loggers apart (INFO,odradek.access=DEBUG)",
    )


def configure_logging(level: str) -> None:
    """``LEVEL`` or ``LEVEL,logger=LEVEL,...``: e.g. ``INFO,odradek.access=DEBUG`` logs every
    request (with its principal and listener) and everything else at INFO."""
    root, *loggers = (part.strip() for part in level.split(","))
    logging.basicConfig(
        level=getattr(logging, root.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for item in loggers:
        name, _, value = item.partition("=")
        if name and value:
            logging.getLogger(name.strip()).setLevel(getattr(logging, value.strip().upper(), logging.INFO))


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    flags: dict[str, Any] = {}
    if args.host is not None or args.port is not None:
        host = args.host if args.host is not None else "127.0.0.1"
        port = args.port if args.port is not None else 9092
        flags["listeners"] = f"PLAINTEXT://{host}:{port}"
    if args.data_dir is not None:
        flags["log.dirs"] = args.data_dir
    if args.broker_id is not None:
        flags["broker.id"] = args.broker_id
    if args.zookeeper is not None:
        flags["zookeeper.connect"] = args.zookeeper
    if getattr(args, "metrics_port", None) is not None:
        flags["metrics.port"] = args.metrics_port
    return flags


async def _serve(config: Any, test_mode: bool = False) -> int:
    from odradek.broker.app import Broker

    broker = Broker(config, test_mode=test_mode)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, broker.reload_tls)  # new certificates, no restart
    try:
        await broker.start()
    finally:  # the cyclic collector was off from the start (run): what the start built is frozen
        gc.freeze()
        gc.enable()
    endpoints = ", ".join(f"{e.listener}://{e.host}:{e.port}" for e in broker.advertised)
    dirs = ",".join(str(d) for d in config.log_dirs)
    metrics = f", metrics at {broker.metrics_url}" if broker.metrics_url else ""
    if broker.schema_registry_url:
        metrics += f", schema registry at {broker.schema_registry_url}"
    if broker.fault_control_url:
        metrics += f", fault control at {broker.fault_control_url}"
    print(
        f"odradek broker {broker.broker_id} ready on {endpoints} "
        f"(cluster {broker.cluster_id}, data in {dirs}{metrics}, started in {broker.ready_after:.2f}s)",
        flush=True,
    )
    await stop.wait()
    logging.getLogger("odradek.broker").info("shutting down")
    await broker.stop()
    return 0


def _where(exc: BaseException) -> str:
    """``file:line`` (the file relative to the package) of the frame the exception was raised in."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    frame = frames[-1]
    path = Path(frame.filename)
    package = Path(__file__).resolve().parent.parent
    with contextlib.suppress(ValueError):
        path = path.resolve().relative_to(package)
    return f"{path}:{frame.lineno}"


def _message(exc: BaseException) -> str:
    """One line for a start-up failure: a KafkaError's message without its code prefix."""
    from odradek.errors import KafkaError

    if isinstance(exc, KafkaError) and exc.message:
        return exc.message
    return str(exc) or type(exc).__name__


def run(args: argparse.Namespace) -> int:
    """Run ``odradek serve`` for the parsed ``args`` until SIGTERM or Ctrl-C; returns the exit
    status: 2 for an invalid setting or option (said on stderr, before anything starts), 1 when the
    broker cannot start or fails."""
    # Start-up imports the broker's modules (most of an empty broker's start-up) and builds the
    # objects of every partition, all long-lived and nearly free of cycles: the cyclic collector
    # would walk them again and again while they pile up (a tenth of the imports' time; 10,000
    # partitions: a fifth of the start-up).  It is off until the broker has started, and then
    # what the start built is frozen (never walked again: shorter collections while serving).
    gc.disable()
    try:
        return _run(args)
    finally:
        gc.enable()


def _run(args: argparse.Namespace) -> int:
    from odradek.config import BrokerConfig, ConfigError
    from odradek.errors import KafkaError
    from odradek.settings import settings_from

    configure_logging(args.log_level)
    metrics_port = getattr(args, "metrics_port", None)
    if metrics_port is not None and not -1 <= metrics_port <= 65535:
        print(
            f"odradek serve: --metrics-port {metrics_port} is out of range: a port is 0-65535 (0 picks a free port, "
            "-1 turns metrics off)",
            file=sys.stderr,
        )
        return 2
    if args.port is not None and not 0 <= args.port <= 65535:
        print(
            f"odradek serve: --port {args.port} is out of range: a port is 0-65535 (0 picks a free port)",
            file=sys.stderr,
        )
        return 2
    try:
        config = BrokerConfig.load(args.config, args.override, _flags(args))
        settings_from(config)  # every setting typed and within Kafka's ranges, before anything starts
    except (ConfigError, OSError) as exc:
        print(f"odradek serve: {_message(exc)}", file=sys.stderr)
        return 2
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    try:
        return int(runner(_serve(config, bool(getattr(args, "test_mode", False)))))
    except (KafkaError, OSError) as exc:
        logging.getLogger("odradek.serve").debug("start-up failed", exc_info=True)
        print(f"odradek serve: {_message(exc)}", file=sys.stderr)
        return 1
    except Exception as exc:  # an unexpected failure: one line with where, the traceback only in the DEBUG log
        logging.getLogger("odradek.serve").debug("start-up failed", exc_info=True)
        print(
            f"odradek serve: {type(exc).__name__}: {_message(exc)} (at {_where(exc)}; run with --log-level DEBUG "
            "for the traceback)",
            file=sys.stderr,
        )
        return 1
