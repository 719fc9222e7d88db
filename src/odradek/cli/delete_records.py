"""``odradek delete-records``: move partitions' log start offsets forward, like kafka-delete-records::

    odradek delete-records --topic orders --partition 0 --offset 100     # records before offset 100
    odradek delete-records --topic orders --offset -1                    # everything, in every partition
    odradek delete-records --offset-json-file plan.json                  # kafka-delete-records' file

The file is Kafka's: ``{"version": 1, "partitions": [{"topic": "orders", "partition": 0, "offset": 100}]}``;
offset -1 means the high watermark (delete every record).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from odradek.cli.topics import add_connection_options, run_admin
from odradek.client import Admin

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Add the ``odradek delete-records`` subcommand (delete the records before an offset, like kafka-delete-
    records) and its options to the top-level subparsers ``sub``."""
    p = sub.add_parser(
        "delete-records",
        help="delete the records before an offset (like kafka-delete-records)",
        description="Delete the records of partitions before an offset (their log start offset moves forward).",
    )
    add_connection_options(p, top=True)
    p.add_argument("--offset-json-file", metavar="FILE", help='{"partitions": [{"topic", "partition", "offset"}]}')
    p.add_argument("--topic", metavar="NAME", help="the topic (instead of a file)")
    p.add_argument("--partition", type=int, action="append", help="with --topic: this partition (default: every one)")
    p.add_argument("--offset", type=int, help="with --topic: delete the records before it (-1: all of them)")


def _plan(admin: Admin, args: argparse.Namespace) -> dict[tuple[str, int], int]:
    if args.offset_json_file:
        if args.topic or args.partition or args.offset is not None:
            raise ValueError("give --offset-json-file or --topic/--partition/--offset, not both")
        try:
            with open(args.offset_json_file, encoding="utf-8") as f:
                data = json.load(f)
            return {(str(e["topic"]), int(e["partition"])): int(e["offset"]) for e in data["partitions"]}
        except OSError as exc:
            raise ValueError(f"--offset-json-file {args.offset_json_file}: {exc.strerror or exc}") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"--offset-json-file {args.offset_json_file}: not a delete-records plan ({exc})") from None
    if not args.topic or args.offset is None:
        raise ValueError("give --offset-json-file FILE, or --topic NAME and --offset N")
    parts = args.partition or [p.partition for p in admin.describe_topics([args.topic])[args.topic].partitions]
    return {(args.topic, p): args.offset for p in sorted(set(parts))}


def cmd(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """``odradek delete-records``: DeleteRecords for the partitions and offsets given (``--offset-json-file``
    or ``--topic`` / ``--offset``), printing each partition's new low watermark, for ``run_admin``: writes
    to ``out`` and returns the exit status; a Kafka error or ValueError raised becomes the one-line error
    and exit status 1."""
    plan = _plan(admin, args)
    if not plan:
        raise ValueError("no partitions to delete records from")
    ends = admin.list_offsets(dict.fromkeys([tp for tp, o in plan.items() if o < 0], "latest"), timeout=args.timeout)
    before = {tp: (ends[tp].offset if o < 0 else o) for tp, o in plan.items()}
    low = admin.delete_records(before, timeout=args.timeout)
    out.write("Records delete operation completed:\n")
    for (topic, partition), start in sorted(low.items()):
        out.write(f"partition: {topic}-{partition}\tlow_watermark: {start}\n")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run ``odradek delete-records`` for the parsed ``args``; returns the exit status: 0, 1 with the error on
    stderr, 2 when neither ``--offset-json-file`` nor ``--topic`` and ``--offset`` are given."""
    if not args.offset_json_file and (not args.topic or args.offset is None):
        print("odradek delete-records: give --offset-json-file FILE, or --topic NAME and --offset N", file=sys.stderr)
        return 2
    return run_admin("delete-records", cmd, args)
