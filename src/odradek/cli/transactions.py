"""``odradek transactions``: list and describe transactions (kafka-transactions.sh's list and
describe)::

    odradek transactions list [--state Ongoing] [--output json]
    odradek transactions describe --transactional-id payments-1 [--output json]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from odradek.cli.topics import add_connection_options, run_admin
from odradek.client import Admin

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("transactions", help="list and describe transactions",
                       description="List and describe transactions (like kafka-transactions).")
    add_connection_options(p, top=True)
    tsub = p.add_subparsers(dest="txn_command", required=True, metavar="COMMAND")
    lst = tsub.add_parser("list", help="every transactional id the coordinators know")
    desc = tsub.add_parser("describe", help="the state of transactional ids")
    for c in (lst, desc):
        add_connection_options(c, top=False)
        c.add_argument("--output", choices=("table", "json"), default="table")
    lst.add_argument("--state", action="append", default=[], metavar="STATE",
                     help="only in this state (Ongoing, PrepareCommit, CompleteCommit, ...; repeatable)")
    desc.add_argument("--transactional-id", action="append", required=True, metavar="ID", help="(repeatable)")


def _table(rows: list[list[str]], out: Any) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


def cmd(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    if args.txn_command == "list":
        listed = admin.list_transactions(args.state or None)
        if args.output == "json":
            out.write(json.dumps([{"transactional_id": t.transactional_id, "producer_id": t.producer_id,
                                   "state": t.state} for t in listed]) + "\n")
        else:
            _table([["TRANSACTIONAL-ID", "PRODUCER-ID", "STATE"]]
                   + [[t.transactional_id, str(t.producer_id), t.state] for t in listed], out)
        return 0
    described = admin.describe_transactions(args.transactional_id)
    if args.output == "json":
        out.write(json.dumps([{
            "transactional_id": d.transactional_id, "coordinator": d.coordinator, "state": d.state,
            "producer_id": d.producer_id, "producer_epoch": d.producer_epoch, "timeout_ms": d.timeout_ms,
            "start_ms": d.start_ms, "partitions": [f"{t}-{p}" for t, p in d.partitions],
        } for d in described.values()]) + "\n")
        return 0
    rows = [["COORDINATOR", "TRANSACTIONAL-ID", "PRODUCER-ID", "EPOCH", "STATE", "TIMEOUT-MS", "START-MS",
             "PARTITIONS"]]
    for d in described.values():
        rows.append([str(d.coordinator), d.transactional_id, str(d.producer_id), str(d.producer_epoch), d.state,
                     str(d.timeout_ms), str(d.start_ms), ",".join(f"{t}-{p}" for t, p in d.partitions) or "-"])
    _table(rows, out)
    return 0


def run(args: argparse.Namespace) -> int:
    return run_admin("transactions", cmd, args)
