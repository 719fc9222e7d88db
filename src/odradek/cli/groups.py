"""``odradek groups``: list, describe (with lag), reset offsets of and delete consumer groups,
like Kafka's kafka-consumer-groups tool."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from typing import Any

from odradek.client import Cluster
from odradek.cluster.assignment import decode_assignment
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.delete_groups import DeleteGroupsRequest
from odradek.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from odradek.protocol.messages.list_groups import ListGroupsRequest
from odradek.protocol.messages.list_offsets import ListOffsetsRequest
from odradek.protocol.messages.offset_commit import OffsetCommitRequest
from odradek.protocol.messages.offset_fetch import OffsetFetchRequest

__all__ = ["add_parser", "run"]

EARLIEST, LATEST = -2, -1


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


def _check(code: int, what: str) -> None:
    if code:
        raise KafkaError(code, what)


def _partitions(cluster: Cluster, topic: str) -> list[int]:
    md = cluster.metadata([topic])
    for t in md.topics:
        if t.name == topic:
            _check(t.error_code, f"topic {topic}")
            return sorted(p.partition_index for p in t.partitions)
    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic}")


def _list_offsets(cluster: Cluster, topic: str, partitions: list[int], timestamp: int) -> dict[int, int]:
    result = {}
    for p in partitions:
        conn = cluster.leader_of(topic, p)
        R = ListOffsetsRequest
        req = R(
            replica_id=-1,
            topics=[R.ListOffsetsTopic(name=topic, partitions=[R.ListOffsetsPartition(partition_index=p, timestamp=timestamp)])],
        )
        resp = conn.request(req, conn.version_for(R, maximum=7))
        part = resp.topics[0].partitions[0]
        _check(part.error_code, f"list offsets of {topic}-{p}")
        result[p] = part.offset
    return result


def _committed(cluster: Cluster, group: str) -> dict[tuple[str, int], int]:
    conn = cluster.coordinator(group)
    v = conn.version_for(OffsetFetchRequest, maximum=7)
    resp = conn.request(OffsetFetchRequest(group_id=group, topics=None), v)
    if v >= 2:
        _check(resp.error_code, f"fetch offsets of group {group}")
    out = {}
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code == 0 and p.committed_offset >= 0:
                out[(t.name, p.partition_index)] = p.committed_offset
    return out


def _describe(cluster: Cluster, group: str) -> DescribeGroupsResponse.DescribedGroup:
    conn = cluster.coordinator(group)
    resp = conn.request(DescribeGroupsRequest(groups=[group]))
    g = resp.groups[0]
    _check(g.error_code, f"describe group {group}")
    return g


def _table(rows: list[list[str]], out: Any) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n")


def cmd_list(cluster: Cluster, args: argparse.Namespace, out: Any) -> int:
    conn = cluster.any()
    v = conn.version_for(ListGroupsRequest)
    resp = conn.request(ListGroupsRequest(states_filter=args.state if v >= 4 else []), v)
    _check(resp.error_code, "list groups")
    groups = resp.groups
    if args.state and v < 4:
        groups = [g for g in groups if g.group_state in args.state]
    rows = [["GROUP", "STATE", "PROTOCOL-TYPE"]]
    rows += [[g.group_id, g.group_state, g.protocol_type] for g in sorted(groups, key=lambda g: g.group_id)]
    _table(rows, out)
    return 0


def cmd_describe(cluster: Cluster, args: argparse.Namespace, out: Any) -> int:
    group = args.group
    g = _describe(cluster, group)
    if g.group_state == "Dead":
        out.write(f"Consumer group '{group}' does not exist.\n")
        return 1
    owners: dict[tuple[str, int], tuple[str, str, str]] = {}
    for m in g.members:
        a = decode_assignment(m.member_assignment) if m.member_assignment else None
        if a is not None:
            for tp in a.assigned_partitions:
                for p in tp.partitions:
                    owners[(tp.topic, p)] = (m.member_id, m.client_host, m.client_id)
    committed = _committed(cluster, group)
    keys = sorted(set(committed) | set(owners))
    ends: dict[tuple[str, int], int] = {}
    for topic in sorted({t for t, _ in keys}):
        parts = sorted(p for t, p in keys if t == topic)
        for p, off in _list_offsets(cluster, topic, parts, LATEST).items():
            ends[(topic, p)] = off
    out.write(f"Consumer group '{group}' is {g.group_state} with {len(g.members)} member(s).\n\n")
    rows = [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]]
    for key in keys:
        cur = committed.get(key)
        end = ends.get(key)
        lag = "-" if cur is None or end is None else str(max(end - cur, 0))
        owner = owners.get(key, ("-", "-", "-"))
        rows.append([group, key[0], str(key[1]), "-" if cur is None else str(cur), "-" if end is None else str(end), lag, *owner])
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


def cmd_reset(cluster: Cluster, args: argparse.Namespace, out: Any) -> int:
    group = args.group
    topic, _, spec = args.topic.partition(":")
    parts = [int(p) for p in spec.split(",")] if spec else _partitions(cluster, topic)
    earliest = _list_offsets(cluster, topic, parts, EARLIEST)
    latest = _list_offsets(cluster, topic, parts, LATEST)
    if args.to_earliest:
        target = dict(earliest)
    elif args.to_latest:
        target = dict(latest)
    elif args.to_offset is not None:
        target = {p: args.to_offset for p in parts}
    elif args.to_datetime is not None:
        found = _list_offsets(cluster, topic, parts, _parse_time(args.to_datetime))
        target = {p: (o if o >= 0 else latest[p]) for p, o in found.items()}
    else:
        committed = _committed(cluster, group)
        target = {p: committed.get((topic, p), latest[p]) + args.shift_by for p in parts}
    target = {p: min(max(o, earliest[p]), latest[p]) for p, o in target.items()}
    g = _describe(cluster, group)
    if args.execute and g.group_state not in ("Empty", "Dead"):
        out.write(f"Error: assignments can only be reset if the group '{group}' is inactive, but it is {g.group_state}.\n")
        return 1
    if args.execute:
        conn = cluster.coordinator(group)
        R = OffsetCommitRequest
        req = R(
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                R.OffsetCommitRequestTopic(
                    name=topic,
                    partitions=[
                        R.OffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_metadata="")
                        for p, o in sorted(target.items())
                    ],
                )
            ],
        )
        resp = conn.request(req, conn.version_for(R, maximum=8))
        for t in resp.topics:
            for p in t.partitions:
                _check(p.error_code, f"commit {t.name}-{p.partition_index}")
    rows = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]]
    rows += [[group, topic, str(p), str(o)] for p, o in sorted(target.items())]
    _table(rows, out)
    if not args.execute:
        out.write("(dry run: add --execute to commit these offsets)\n")
    return 0


def cmd_delete(cluster: Cluster, args: argparse.Namespace, out: Any) -> int:
    conn = cluster.coordinator(args.group)
    resp = conn.request(DeleteGroupsRequest(groups_names=[args.group]))
    r = resp.results[0]
    if r.error_code:
        err = ErrorCode.of(r.error_code)
        reason = {
            ErrorCode.NON_EMPTY_GROUP: "the group is not empty",
            ErrorCode.GROUP_ID_NOT_FOUND: "the group does not exist",
        }.get(err, err.name)
        out.write(f"Error: deletion of consumer group '{args.group}' failed: {reason}.\n")
        return 1
    out.write(f"Deletion of requested consumer groups ('{args.group}') was successful.\n")
    return 0


def run(args: argparse.Namespace) -> int:
    commands = {"list": cmd_list, "describe": cmd_describe, "reset-offsets": cmd_reset, "delete": cmd_delete}
    cluster = Cluster(args.bootstrap_server, client_id="odradek-groups", timeout=args.timeout)
    try:
        return commands[args.groups_command](cluster, args, sys.stdout)
    except (KafkaError, ConnectionError, TimeoutError, ValueError) as exc:
        print(f"odradek groups: {exc}", file=sys.stderr)
        return 1
    finally:
        cluster.close()
