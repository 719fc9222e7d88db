"""``odradek transactions``: kafka-transactions.sh's list, describe, describe-producers,
find-hanging and abort::

    odradek transactions list [--state Ongoing] [--output json]
    odradek transactions describe --transactional-id payments-1 [--output json]
    odradek transactions describe-producers --topic payments --partition 0 [--output json]
    odradek transactions find-hanging --topic payments [--partition 0] [--max-transaction-timeout 15]
    odradek transactions abort --topic payments --partition 0 --start-offset 42
    odradek transactions abort --topic payments --partition 0 --producer-id 7 --producer-epoch 0 --coordinator-epoch 3

A hanging transaction is one a partition holds open (it keeps the last stable offset, and so
every read_committed consumer, from moving) while no coordinator knows it any more, e.g. after
a lost marker; ``abort`` writes the ABORT marker its coordinator would have written.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from odradek.cli.topics import add_connection_options, run_admin
from odradek.client import Admin

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Add the ``odradek transactions`` subcommand (list, describe and abort transactions, like kafka-
    transactions) and its options to the top-level subparsers ``sub``."""
    p = sub.add_parser("transactions", help="list, describe and abort transactions",
                       description="List, describe and abort transactions (like kafka-transactions).")
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
    prod = tsub.add_parser("describe-producers", help="the producers a partition's leader knows")
    hang = tsub.add_parser("find-hanging", help="open transactions on partitions that no coordinator knows")
    abort = tsub.add_parser("abort", help="abort a hanging transaction on one partition (needs ClusterAction)")
    for c in (prod, hang, abort):
        add_connection_options(c, top=False)
        c.add_argument("--topic", required=True)
    for c in (prod, hang):
        c.add_argument("--output", choices=("table", "json"), default="table")
    prod.add_argument("--partition", type=int, required=True)
    hang.add_argument("--partition", type=int, default=None, help="(default: every partition of the topic)")
    hang.add_argument("--max-transaction-timeout", type=float, default=15.0, metavar="MINUTES",
                      help="open longer than this (the brokers' transaction.max.timeout.ms; default 15)")
    abort.add_argument("--partition", type=int, required=True)
    abort.add_argument("--start-offset", type=int, default=None,
                       help="the first offset of the open transaction (describe-producers shows it)")
    abort.add_argument("--producer-id", type=int, default=None)
    abort.add_argument("--producer-epoch", type=int, default=None)
    abort.add_argument("--coordinator-epoch", type=int, default=None)


def _table(rows: list[list[str]], out: Any) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


def _producer_json(tp: tuple[str, int], p: Any) -> dict[str, Any]:
    return {"topic": tp[0], "partition": tp[1], "producer_id": p.producer_id, "producer_epoch": p.producer_epoch,
            "last_sequence": p.last_sequence, "last_timestamp": p.last_timestamp,
            "coordinator_epoch": p.coordinator_epoch, "current_txn_start_offset": p.current_txn_start_offset}


def _producers_out(found: list[tuple[tuple[str, int], Any]], output: str, out: Any) -> None:
    if output == "json":
        out.write(json.dumps([_producer_json(tp, p) for tp, p in found]) + "\n")
        return
    rows = [["TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "COORDINATOR-EPOCH", "LAST-SEQUENCE",
             "LAST-TIMESTAMP", "CURRENT-TXN-START-OFFSET"]]
    for tp, p in found:
        rows.append([tp[0], str(tp[1]), str(p.producer_id), str(p.producer_epoch), str(p.coordinator_epoch),
                     str(p.last_sequence), str(p.last_timestamp),
                     str(p.current_txn_start_offset) if p.current_txn_start_offset >= 0 else "None"])
    _table(rows, out)


def _find_hanging(admin: Admin, args: argparse.Namespace) -> list[tuple[tuple[str, int], Any]]:
    """Producers with a transaction open on a partition for longer than the longest transaction
    timeout that no coordinator has (Ongoing, with this producer id and this partition)."""
    if args.partition is not None:
        tps = [(args.topic, args.partition)]
    else:
        described = admin.describe_topics([args.topic])[args.topic]
        tps = [(args.topic, p.partition) for p in described.partitions]
    now_ms = time.time() * 1000
    limit_ms = args.max_transaction_timeout * 60_000
    candidates = [
        (tp, p) for tp, ps in admin.describe_producers(tps).items() for p in ps
        if p.current_txn_start_offset >= 0 and now_ms - p.last_timestamp > limit_ms
    ]
    if not candidates:
        return []
    wanted = {p.producer_id for _, p in candidates}
    ids = [t.transactional_id for t in admin.list_transactions() if t.producer_id in wanted]
    known = {(d.producer_id, tp) for d in admin.describe_transactions(ids).values() if d.state == "Ongoing"
             for tp in d.partitions} if ids else set()
    return [(tp, p) for tp, p in candidates if (p.producer_id, tp) not in known]


def _abort(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    tp = (args.topic, args.partition)
    epochs = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
    if args.start_offset is not None:
        if any(e is not None for e in epochs):
            print("odradek transactions: abort takes --start-offset or the producer's ids, not both", file=sys.stderr)
            return 2
        open_here = [p for p in admin.describe_producers([tp])[tp] if p.current_txn_start_offset == args.start_offset]
        if not open_here:
            print(f"odradek transactions: no transaction open at offset {args.start_offset} of {tp[0]}-{tp[1]} "
                  "(see describe-producers)", file=sys.stderr)
            return 1
        p = open_here[0]
        pid, epoch, coordinator_epoch = p.producer_id, p.producer_epoch, p.coordinator_epoch
    elif any(e is None for e in epochs):
        print("odradek transactions: abort needs --start-offset, or --producer-id, --producer-epoch and "
              "--coordinator-epoch", file=sys.stderr)
        return 2
    else:
        pid, epoch, coordinator_epoch = epochs
    admin.abort_transaction(tp, pid, epoch, coordinator_epoch)
    out.write(f"aborted the transaction of producer {pid} (epoch {epoch}) on {tp[0]}-{tp[1]}\n")
    return 0


def cmd(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """``odradek transactions list|describe|describe-producers|find-hanging|abort`` through the admin API, for
    ``run_admin``: writes to ``out`` and returns the exit status; a Kafka error or ValueError raised
    becomes the one-line error and exit status 1."""
    if args.txn_command == "describe-producers":
        tp = (args.topic, args.partition)
        _producers_out([(tp, p) for p in admin.describe_producers([tp])[tp]], args.output, out)
        return 0
    if args.txn_command == "find-hanging":
        _producers_out(_find_hanging(admin, args), args.output, out)
        return 0
    if args.txn_command == "abort":
        return _abort(admin, args, out)
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
    """Run ``odradek transactions`` for the parsed ``args``; returns the exit status: 0, or 1 with the error
    on stderr."""
    return run_admin("transactions", cmd, args)
