"""``odradek groups``: list, describe (with lag), reset offsets of and delete consumer groups,
like Kafka's kafka-consumer-groups tool."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from odradek.cli.topics import run_admin
from odradek.client import Admin
from odradek.errors import ErrorCode, KafkaError

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("groups", help="list, describe, reset offsets of and delete consumer groups")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092", help="host:port[,host:port] (default 127.0.0.1:9092)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each request")
    gsub = p.add_subparsers(dest="groups_command", required=True, metavar="COMMAND")
    ls = gsub.add_parser("list", help="list groups")
    ls.add_argument("--state", action="append", default=[], help="only groups in this state (repeatable)")
    d = gsub.add_parser("describe", help="members, assignments, committed offsets and lag")
    d.add_argument("group")
    r = gsub.add_parser("reset-offsets", help="set a group's committed offsets (the group must be inactive)")
    r.add_argument("group")
    r.add_argument("--topic", required=True, help="TOPIC or TOPIC:P1,P2 (default: every partition)")
    target = r.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-offset", type=int)
    target.add_argument("--to-datetime", help="ISO 8601, e.g. 2026-01-31T12:00:00.000 (UTC unless an offset is given)")
    target.add_argument("--shift-by", type=int)
    r.add_argument("--execute", action="store_true", help="commit the new offsets (default: only show them)")
    rm = gsub.add_parser("delete", help="delete an inactive group and its offsets")
    rm.add_argument("group")


def _partitions(admin: Admin, topic: str) -> list[int]:
    return sorted(p.partition for p in admin.describe_topics([topic])[topic].partitions)


def _offsets(admin: Admin, topic: str, partitions: list[int], spec: str | int) -> dict[int, int]:
    found = admin.list_offsets({(topic, p): spec for p in partitions})
    return {p: found[(topic, p)].offset for p in partitions}


def _table(rows: list[list[str]], out: Any) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n")


def cmd_list(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    groups = admin.list_groups(args.state or None)
    rows = [["GROUP", "STATE", "PROTOCOL-TYPE"]]
    rows += [[g.group_id, g.state or "", g.protocol_type] for g in sorted(groups, key=lambda g: g.group_id)]
    _table(rows, out)
    return 0


def cmd_describe(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    group = args.group
    g = admin.describe_groups([group])[group]
    if g.state == "Dead":
        out.write(f"Consumer group '{group}' does not exist.\n")
        return 1
    lags = admin.group_lag(group)
    out.write(f"Consumer group '{group}' is {g.state} with {len(g.members)} member(s).\n\n")
    rows = [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]]
    for (topic, partition), lag in sorted(lags.items()):
        m = lag.member
        owner = ("-", "-", "-") if m is None else (m.member_id, m.host, m.client_id)
        rows.append([
            group, topic, str(partition),
            "-" if lag.committed_offset is None else str(lag.committed_offset),
            "-" if lag.log_end_offset is None else str(lag.log_end_offset),
            "-" if lag.lag is None else str(lag.lag),
            *owner,
        ])
    if len(rows) == 1:
        out.write(f"Consumer group '{group}' has no committed offsets and no assignment.\n")
    else:
        _table(rows, out)
    return 0


def _parse_time(text: str) -> int:
    when = dt.datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def cmd_reset(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    group = args.group
    topic, _, spec = args.topic.partition(":")
    parts = [int(p) for p in spec.split(",")] if spec else _partitions(admin, topic)
    earliest = _offsets(admin, topic, parts, "earliest")
    latest = _offsets(admin, topic, parts, "latest")
    if args.to_earliest:
        target = dict(earliest)
    elif args.to_latest:
        target = dict(latest)
    elif args.to_offset is not None:
        target = {p: args.to_offset for p in parts}
    elif args.to_datetime is not None:
        found = _offsets(admin, topic, parts, _parse_time(args.to_datetime))
        target = {p: (o if o >= 0 else latest[p]) for p, o in found.items()}
    else:
        committed = admin.list_group_offsets(group, [(topic, p) for p in parts])
        target = {p: (committed[(topic, p)].offset if (topic, p) in committed else latest[p]) + args.shift_by
                  for p in parts}
    target = {p: min(max(o, earliest[p]), latest[p]) for p, o in target.items()}
    state = admin.describe_groups([group])[group].state
    if args.execute and state not in ("Empty", "Dead"):
        out.write(f"Error: assignments can only be reset if the group '{group}' is inactive, but it is {state}.\n")
        return 1
    if args.execute:
        admin.alter_group_offsets(group, {(topic, p): o for p, o in sorted(target.items())})
    rows = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]]
    rows += [[group, topic, str(p), str(o)] for p, o in sorted(target.items())]
    _table(rows, out)
    if not args.execute:
        out.write("(dry run: add --execute to commit these offsets)\n")
    return 0


def cmd_delete(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    try:
        admin.delete_groups([args.group])
    except KafkaError as exc:
        reason = {
            ErrorCode.NON_EMPTY_GROUP: "the group is not empty",
            ErrorCode.GROUP_ID_NOT_FOUND: "the group does not exist",
        }.get(exc.code)
        if reason is None:
            raise
        out.write(f"Error: deletion of consumer group '{args.group}' failed: {reason}.\n")
        return 1
    out.write(f"Deletion of requested consumer groups ('{args.group}') was successful.\n")
    return 0


def run(args: argparse.Namespace) -> int:
    commands = {"list": cmd_list, "describe": cmd_describe, "reset-offsets": cmd_reset, "delete": cmd_delete}
    return run_admin("groups", commands[args.groups_command], args)
