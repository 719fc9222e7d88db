"""``odradek log-dirs``: the brokers' log directories and the replicas in them, like
``kafka-log-dirs.sh``, and moving a replica to another dir of its broker.

::

    odradek log-dirs describe [--broker-list 1,2] [--topic-list orders,payments] [--output json]
    odradek log-dirs move --topic orders --partition 0 --broker 1 --dir /disk2/odradek

``describe`` prints, per broker and dir, the dir's state, its file system's usable and total bytes,
and each replica's size, offset lag and whether it is a future replica (a move into the dir in
progress).  ``--output json`` is kafka-log-dirs' JSON: ``{"version": 1, "brokers": [{"broker",
"logDirs": [{"logDir", "error", "partitions": [{"partition": "t-0", "size", "offsetLag",
"isFuture"}]}]}]}``.  ``move`` sends AlterReplicaLogDirs to the replica's broker; the copy runs
there while the replica serves (``describe`` shows its progress as a future replica).
"""

from __future__ import annotations

import argparse
from typing import Any

from odradek.cli._common import add_output_option, write_json
from odradek.cli.topics import add_connection_options, run_admin
from odradek.client import Admin

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Add the ``odradek log-dirs`` subcommand (describe the brokers' log dirs, move a replica between
    them) and its options to the top-level subparsers ``sub``."""
    p = sub.add_parser(
        "log-dirs",
        help="the brokers' log dirs and the replicas in them; move a replica between dirs",
        description="Describe the brokers' log directories (like kafka-log-dirs.sh) or move a replica to another "
        "log dir of its broker (AlterReplicaLogDirs).",
    )
    add_connection_options(p, top=True)
    lsub = p.add_subparsers(dest="log_dirs_command", required=True, metavar="COMMAND")
    desc = lsub.add_parser("describe", help="each broker's dirs and replicas", description="Describe log dirs.")
    desc.add_argument("--broker-list", metavar="IDS", help="comma-separated broker ids (default: every broker)")
    desc.add_argument("--topic-list", metavar="TOPICS", help="comma-separated topics (default: every topic)")
    add_output_option(desc)
    move = lsub.add_parser("move", help="move a replica to another log dir of its broker",
                           description="Move a replica to another log dir of its broker, while it serves.")
    move.add_argument("--topic", required=True)
    move.add_argument("--partition", type=int, required=True)
    move.add_argument("--broker", type=int, required=True, help="the broker holding the replica")
    move.add_argument("--dir", required=True, help="the target log dir (one of the broker's log.dirs)")
    for c in (desc, move):
        add_connection_options(c, top=False)


def _describe(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    brokers = [int(b) for b in args.broker_list.split(",") if b.strip()] if args.broker_list else None
    topics = {t.strip() for t in args.topic_list.split(",") if t.strip()} if args.topic_list else None
    described = admin.describe_log_dirs(brokers, timeout=args.timeout)
    doc: dict[str, Any] = {"version": 1, "brokers": []}
    for broker, dirs in sorted(described.items()):
        log_dirs: list[dict[str, Any]] = []
        for path, d in sorted(dirs.items()):
            parts = [
                {"partition": f"{t}-{p}", "size": info.size, "offsetLag": info.offset_lag, "isFuture": info.is_future}
                for (t, p), info in sorted(d.replicas.items())
                if topics is None or t in topics
            ]
            log_dirs.append({"logDir": path, "error": None if d.error is None else d.error.code.name,
                                     "partitions": parts, "totalBytes": d.total_bytes, "usableBytes": d.usable_bytes})
        doc["brokers"].append({"broker": broker, "logDirs": log_dirs})
    if getattr(args, "output", "table") == "json":
        write_json(doc, out)
        return 0
    for b in doc["brokers"]:
        for d in b["logDirs"]:
            state = "online" if d["error"] is None else d["error"]
            room = "" if d["usableBytes"] is None else f", {d['usableBytes']:,} of {d['totalBytes']:,} bytes free"
            out.write(f"broker {b['broker']}  {d['logDir']}  ({state}{room})\n")
            for p in d["partitions"]:
                future = "  (future: being moved here)" if p["isFuture"] else ""
                out.write(f"    {p['partition']:<40} {p['size']:>14,} bytes  offset lag {p['offsetLag']}{future}\n")
    return 0


def _move(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    admin.alter_replica_log_dirs({(args.topic, args.partition, args.broker): args.dir}, timeout=args.timeout)
    out.write(f"{args.topic}-{args.partition} on broker {args.broker}: moving to {args.dir} "
              "(odradek log-dirs describe shows the copy as a future replica until it is done)\n")
    return 0


def cmd_broker(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """``odradek log-dirs describe|move`` through the admin API, for ``run_admin``."""
    if args.log_dirs_command == "describe":
        return _describe(admin, args, out)
    return _move(admin, args, out)


def run(args: argparse.Namespace) -> int:
    """Run ``odradek log-dirs`` for the parsed ``args``; returns the exit status."""
    return run_admin("log-dirs", cmd_broker, args)
