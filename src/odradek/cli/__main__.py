"""``odradek`` / ``python -m odradek``: the command-line entry point.

Subcommands import what they need lazily, so that each starts quickly.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main", "run"]


def _parser(*, serve_only: bool = False) -> argparse.ArgumentParser:
    """The whole command line; with ``serve_only`` only ``odradek serve``'s, which then does not
    import the commands' modules (most import the client: a tenth of a second of a broker's
    start-up, and memory it keeps)."""
    from odradek import __version__

    parser = argparse.ArgumentParser(prog="odradek", description="A Kafka-compatible distributed commit log.")
    parser.add_argument("--version", action="version", version=f"odradek {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if serve_only:
        from odradek.cli import serve

        serve.add_parser(sub)
        return parser

    dump = sub.add_parser(
        "dump-log",
        help="print the batches of .log segments (markers too) and check .index/.timeindex/.txnindex files",
        description="Print log segments (batches, offsets, timestamps, codecs) and check their indexes.",
    )
    dump.add_argument("paths", nargs="+", metavar="PATH", help=".log, .index, .timeindex or .txnindex files, or partition dirs")
    dump.add_argument("--print-data-log", action="store_true", help="print keys, values and headers of records")
    dump.add_argument("--deep-iteration", action="store_true", help="print every record, not only batches")
    dump.add_argument("--max-bytes", type=int, default=None, help="stop after this many bytes of each .log file")
    dump.add_argument("--verify", action="store_true", help="check every batch and index entry; exit 1 on damage")
    dump.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None,
        help="a progress line on stderr every 2 s (default: when stderr is a terminal)",
    )  # fmt: skip
    dump.add_argument("--progress-interval", type=float, default=2.0, help=argparse.SUPPRESS)

    from odradek.cli import configs, groups, serve, topics

    serve.add_parser(sub)

    from odradek.cli import consume

    consume.add_parser(sub)

    from odradek.cli import produce

    produce.add_parser(sub)
    topics.add_parser(sub)
    groups.add_parser(sub)

    from odradek.cli import share_groups

    share_groups.add_parser(sub)
    configs.add_parser(sub)

    from odradek.cli import acls, certs, features, transactions, users

    users.add_parser(sub)
    acls.add_parser(sub)
    certs.add_parser(sub)
    transactions.add_parser(sub)
    features.add_parser(sub)

    from odradek.cli import log_dirs, reassign

    reassign.add_parser(sub)
    log_dirs.add_parser(sub)

    from odradek.cli import bench, cluster, pipeline

    cluster.add_parser(sub)
    pipeline.add_parser(sub)
    bench.add_parser(sub)
    from odradek.cli import console

    console.add_parser(sub)
    from odradek.cli import completion, delete_records, metadata, schemas

    schemas.add_parser(sub)
    from odradek.cli import tables

    tables.add_parser(sub)
    metadata.add_parser(sub)
    delete_records.add_parser(sub)
    completion.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``odradek`` command line (``sys.argv[1:]`` when ``argv`` is None) in this process
    and return its exit status (0 success, 1 failure, 2 usage error, 130 interrupted); argparse
    exits itself on ``--help``, ``--version`` and bad arguments."""
    from odradek.cli import _common

    words = sys.argv[1:] if argv is None else list(argv)
    # ``odradek serve ...`` (the command first) is parsed by serve's parser alone
    parser = _parser(serve_only=words[:1] == ["serve"])
    _common.spread_global_options(parser)
    args = _common.parse(parser, words)
    _given.append(args.command)
    problem = _common.missing_extra(*_needed_modules(args))
    if problem is not None:
        return _common.fail(args.command, problem)
    if args.command == "completion":
        from odradek.cli import completion

        return completion.run(args, parser)
    if args.command == "schemas":
        from odradek.cli import schemas

        return schemas.run(args)
    if args.command == "tables":
        from odradek.cli import tables

        return tables.run(args)
    if args.command == "metadata":
        from odradek.cli import metadata

        return metadata.run(args)
    if args.command == "delete-records":
        from odradek.cli import delete_records

        return delete_records.run(args)
    if args.command == "cluster":
        from odradek.cli import cluster

        return cluster.run(args)
    if args.command == "console":
        from odradek.cli import console

        return console.run(args)
    if args.command == "bench":
        from odradek.cli import bench

        return bench.run(args)
    if args.command == "pipeline":
        from odradek.cli import pipeline

        return pipeline.run(args)
    if args.command == "groups":
        from odradek.cli import groups

        return groups.run(args)
    if args.command == "share-groups":
        from odradek.cli import share_groups

        return share_groups.run(args)
    if args.command == "topics":
        from odradek.cli import topics

        return topics.run(args)
    if args.command == "configs":
        from odradek.cli import configs

        return configs.run(args)
    if args.command == "certs":
        from odradek.cli import certs

        return certs.run(args)
    if args.command == "acls":
        from odradek.cli import acls

        return acls.run(args)
    if args.command == "transactions":
        from odradek.cli import transactions

        return transactions.run(args)
    if args.command == "users":
        from odradek.cli import users

        return users.run(args)
    if args.command == "features":
        from odradek.cli import features

        return features.run(args)
    if args.command == "reassign":
        from odradek.cli import reassign

        return reassign.run(args)
    if args.command == "log-dirs":
        from odradek.cli import log_dirs

        return log_dirs.run(args)
    if args.command == "consume":
        from odradek.cli import consume

        return consume.run(args)
    if args.command == "produce":
        from odradek.cli import produce

        return produce.run(args)
    if args.command == "serve":
        from odradek.cli import serve

        return serve.run(args)
    if args.command == "dump-log":
        from odradek.cli._progress import Progress
        from odradek.cli.dump_log import dump_paths, verify_paths

        progress = Progress("dump-log", interval=args.progress_interval, enabled=args.progress)
        if args.verify:
            return verify_paths(args.paths, out=sys.stdout, progress=progress)

        return dump_paths(
            args.paths,
            print_data=args.print_data_log,
            deep=args.deep_iteration or args.print_data_log,
            max_bytes=args.max_bytes,
            out=sys.stdout,
            progress=progress,
        )
    return 2


_given: list[str] = []  # the command being run, for run()'s messages


def _needed_modules(args: argparse.Namespace) -> list[str]:
    """The optional modules (from extras) the command given needs, checked before it starts."""
    command = args.command
    if command == "cluster" and args.cluster_command != "elect-leaders":
        return ["kazoo"]  # ZooKeeper is read with kazoo, and every broker of the cluster needs it
    if command == "pipeline" and args.pipeline_command == "run":
        return ["pyspark", "pyarrow"]
    if command == "tables":
        return ["pyiceberg", "pyarrow"]
    if command in ("serve", "groups", "acls", "users") and getattr(args, "zookeeper", None):
        return ["kazoo"]
    return []


def _quiet_asyncio() -> None:
    """After Ctrl-C the clients' asyncio loops may be cut off mid-task: say nothing about it."""
    import logging

    logging.getLogger("asyncio").setLevel(logging.CRITICAL + 1)


def _interrupted(signum: int, frame: object) -> None:
    """SIGINT handler: quiet asyncio's shutdown noise, then stop as Ctrl-C does."""
    _quiet_asyncio()
    raise KeyboardInterrupt


def run() -> None:
    """Console-script entry: exit quietly when the output pipe closes (``| head``), with 130 on
    Ctrl-C, and with what to install when an optional extra is missing."""
    import signal

    from odradek.cli import _common

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted)
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    except KeyboardInterrupt:
        _quiet_asyncio()
        code = _common.EXIT_INTERRUPTED
    except ModuleNotFoundError as exc:
        if _common.extra_for(exc.name or "") is None:
            raise
        print(f"odradek{' ' + _given[-1] if _given else ''}: {_common.install_hint(exc.name or '')}", file=sys.stderr)
        code = _common.EXIT_FAILURE
    sys.exit(code)


if __name__ == "__main__":
    run()
