"""``odradek share-groups``: list, describe, reset the offsets of and delete share groups (KIP-932),
like Kafka's kafka-share-groups tool.

``describe`` shows the members (id, client id, host, assignment) and, per share-partition, its
start offset and lag (DescribeShareGroupOffsets).  The in-flight records of a share-partition
(acquired, available for redelivery) are known only to the partition's leader and no Kafka API
asks for them: they are on the leader's /metrics (``kafka_server_share_partition_metrics_*``), not
here."""

from __future__ import annotations

import argparse
from typing import Any

from odradek.cli._common import add_output_option, write_json
from odradek.cli.groups import _offsets, _partitions, _table
from odradek.cli.topics import add_connect_timeout, run_admin
from odradek.client import Admin
from odradek.client.admin.types import AdminError
from odradek.errors import ErrorCode, KafkaError

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Add ``odradek share-groups`` (list, describe, reset-offsets, delete) to the subparsers ``sub``."""
    p = sub.add_parser("share-groups", help="list, describe, reset offsets of and delete share groups (KIP-932)")
    p.add_argument("-b", "--bootstrap-server", default="127.0.0.1:9092", help="host:port[,host:port] (default 127.0.0.1:9092)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each request")
    add_connect_timeout(p)
    gsub = p.add_subparsers(dest="share_groups_command", required=True, metavar="COMMAND")
    ls = gsub.add_parser("list", help="list share groups")
    add_output_option(ls)
    d = gsub.add_parser("describe", help="members, assignments, share-partition start offsets and lag")
    d.add_argument("group")
    add_output_option(d)
    r = gsub.add_parser("reset-offsets", help="set a share group's start offsets (the group must be empty)")
    r.add_argument("group")
    r.add_argument("--topic", required=True, help="TOPIC or TOPIC:P1,P2 (default: every partition)")
    target = r.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-offset", type=int)
    r.add_argument("--execute", action="store_true", help="set the new offsets (default: only show them)")
    rm = gsub.add_parser("delete", help="delete an empty share group and its share-partition state")
    rm.add_argument("group")


def cmd_list(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """``odradek share-groups list``: each share group with its state and member count."""
    groups = admin.list_share_groups()
    described = admin.describe_share_groups(groups) if groups else {}
    rows = [(g, described[g].state, len(described[g].members)) for g in groups if g in described]
    if args.output == "json":
        write_json([{"group_id": g, "state": st, "members": n} for g, st, n in rows], out)
        return 0
    _table([["GROUP", "STATE", "MEMBERS"]] + [[g, st, str(n)] for g, st, n in rows], out)
    return 0


def _not_found(exc: KafkaError) -> bool:
    if isinstance(exc, AdminError):
        return all(e.code == ErrorCode.GROUP_ID_NOT_FOUND for e in exc.errors.values())
    return exc.code == ErrorCode.GROUP_ID_NOT_FOUND


def cmd_describe(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """``odradek share-groups describe``: the members and, per share-partition, the start offset and lag."""
    group = args.group
    try:
        g = admin.describe_share_groups([group])[group]
    except KafkaError as exc:
        if not _not_found(exc):
            raise
        if args.output == "json":
            raise ValueError(f"share group {group!r} does not exist") from None
        out.write(f"Share group '{group}' does not exist.\n")
        return 1
    offsets = admin.describe_share_group_offsets(group)
    owner = {tp: m for m in g.members for tp in m.assignment}
    if args.output == "json":
        write_json({
            "group_id": group, "state": g.state, "group_epoch": g.group_epoch,
            "assignment_epoch": g.assignment_epoch, "assignor": g.assignor,
            "coordinator": None if g.coordinator is None else g.coordinator.id,
            "members": [{
                "member_id": m.member_id, "client_id": m.client_id, "host": m.host, "member_epoch": m.member_epoch,
                "assignment": [{"topic": t, "partition": p} for t, p in m.assignment],
            } for m in sorted(g.members, key=lambda m: m.member_id)],
            "offsets": [{
                "topic": t, "partition": p, "start_offset": o.start_offset, "leader_epoch": o.leader_epoch,
                "lag": None if o.lag < 0 else o.lag,
            } for (t, p), o in sorted(offsets.items())],
        }, out)
        return 0
    out.write(f"Share group '{group}' is {g.state} with {len(g.members)} member(s): group epoch {g.group_epoch}, "
              f"assignment epoch {g.assignment_epoch}, assignor {g.assignor}.\n\n")
    if g.members:
        rows = [["MEMBER-ID", "CLIENT-ID", "HOST", "#PARTITIONS", "ASSIGNMENT"]]
        for m in sorted(g.members, key=lambda m: m.member_id):
            by_topic: dict[str, list[int]] = {}
            for t, p in m.assignment:
                by_topic.setdefault(t, []).append(p)
            assignment = ";".join(f"{t}:{','.join(map(str, ps))}" for t, ps in sorted(by_topic.items())) or "-"
            rows.append([m.member_id, m.client_id, m.host, str(len(m.assignment)), assignment])
        _table(rows, out)
        out.write("\n")
    if not offsets:
        out.write(f"Share group '{group}' has no share-partition state.\n")
        return 0
    rows = [["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG", "CONSUMER-ID"]]
    for (t, p), o in sorted(offsets.items()):
        held = owner.get((t, p))
        rows.append([group, t, str(p), str(o.start_offset), "-" if o.lag < 0 else str(o.lag),
                     "-" if held is None else held.member_id])
    _table(rows, out)
    out.write("(in-flight records are known only to each partition's leader: its /metrics, "
              "kafka_server_share_partition_metrics_*)\n")
    return 0


def cmd_reset(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """``odradek share-groups reset-offsets``: the new start offsets (a dry run unless ``--execute``;
    an empty group only)."""
    group = args.group
    topic, _, spec = args.topic.partition(":")
    parts = [int(p) for p in spec.split(",")] if spec else _partitions(admin, topic)
    earliest = _offsets(admin, topic, parts, "earliest")
    latest = _offsets(admin, topic, parts, "latest")
    if args.to_earliest:
        target = dict(earliest)
    elif args.to_latest:
        target = dict(latest)
    else:
        target = {p: min(max(args.to_offset, earliest[p]), latest[p]) for p in parts}
    if args.execute:
        try:
            admin.alter_share_group_offsets(group, {(topic, p): o for p, o in sorted(target.items())})
        except KafkaError as exc:
            if exc.code != ErrorCode.NON_EMPTY_GROUP:
                raise
            out.write(f"Error: share group '{group}' is not empty: its offsets can only be reset when it has no "
                      f"members (NON_EMPTY_GROUP).\n")
            return 1
    _table([["GROUP", "TOPIC", "PARTITION", "NEW-START-OFFSET"]]
           + [[group, topic, str(p), str(o)] for p, o in sorted(target.items())], out)
    if not args.execute:
        out.write("(dry run: add --execute to set these offsets)\n")
    return 0


def cmd_delete(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """Delete the group's share-partition state (DeleteShareGroupOffsets, which refuses a group with
    members), then the group (DeleteGroups)."""
    group = args.group
    try:
        offsets = admin.describe_share_group_offsets(group)
        topics = sorted({t for t, _p in offsets})
        if topics:
            admin.delete_share_group_offsets(group, topics)
        try:
            admin.delete_groups([group])
        except KafkaError as exc:
            if not (topics and _not_found(exc)):  # its state was all that was left of it
                raise
    except KafkaError as exc:
        code = exc.code  # an AdminError's is its first failure's
        reason = {
            ErrorCode.NON_EMPTY_GROUP: "the group is not empty (NON_EMPTY_GROUP)",
            ErrorCode.GROUP_ID_NOT_FOUND: "the group does not exist (GROUP_ID_NOT_FOUND)",
        }.get(code)
        if reason is None:
            raise
        out.write(f"Error: deletion of share group '{group}' failed: {reason}.\n")
        return 1
    out.write(f"Deletion of requested share groups ('{group}') was successful.\n")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run ``odradek share-groups`` for the parsed ``args``; the exit status."""
    commands = {"list": cmd_list, "describe": cmd_describe, "reset-offsets": cmd_reset, "delete": cmd_delete}
    return run_admin("share-groups", commands[args.share_groups_command], args)
