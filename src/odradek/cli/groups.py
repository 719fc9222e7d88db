"""``odradek groups``: list, describe (with lag), reset offsets of and delete consumer groups,
like Kafka's kafka-consumer-groups tool.  With ``--zookeeper`` the groups of ZooKeeper consumers
(Kafka 0.8-0.10's high-level consumer: ``/consumers/<group>``) are listed, described and reset
too, marked as such."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
from typing import Any

from odradek.cli._common import add_output_option, write_json
from odradek.cli.topics import add_connect_timeout, run_admin

try:  # ZooKeeper groups (--zookeeper) need kazoo, the ``cluster`` extra
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError
except ImportError:  # pragma: no cover - a plain install
    KazooClient = None
    NoNodeError = LookupError
from odradek.client import Admin
from odradek.errors import ErrorCode, KafkaError

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Add the ``odradek groups`` subcommand (list, describe, reset offsets of and delete consumer groups,
    like kafka-consumer-groups) and its options to the top-level subparsers ``sub``."""
    p = sub.add_parser("groups", help="list, describe, reset offsets of and delete consumer groups")
    p.add_argument("-b", "--bootstrap-server", default="127.0.0.1:9092", help="host:port[,host:port] (default 127.0.0.1:9092)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each request")
    add_connect_timeout(p)
    p.add_argument(
        "--zookeeper",
        metavar="HOST:PORT[/CHROOT]",
        help="also the ZooKeeper consumers' groups (/consumers/<group>, Kafka 0.8-0.10's high-level consumer)",
    )
    gsub = p.add_subparsers(dest="groups_command", required=True, metavar="COMMAND")
    ls = gsub.add_parser("list", help="list groups")
    ls.add_argument("--state", action="append", default=[], help="only groups in this state (repeatable)")
    add_output_option(ls)
    d = gsub.add_parser("describe", help="members, assignments, committed offsets and lag")
    d.add_argument("group")
    add_output_option(d)
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
    do = gsub.add_parser(
        "delete-offsets", help="delete a group's committed offsets of a topic (not while it consumes the topic)"
    )
    do.add_argument("group")
    do.add_argument("--topic", required=True, action="append", help="TOPIC or TOPIC:P1,P2 (repeatable)")


def _partitions(admin: Admin, topic: str) -> list[int]:
    return sorted(p.partition for p in admin.describe_topics([topic])[topic].partitions)


def _offsets(admin: Admin, topic: str, partitions: list[int], spec: str | int) -> dict[int, int]:
    found = admin.list_offsets({(topic, p): spec for p in partitions})
    return {p: found[(topic, p)].offset for p in partitions}


def _table(rows: list[list[str]], out: Any) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n")


class _ZkGroups:
    """The ZooKeeper consumers' groups, read (and reset) straight from ``/consumers``."""

    def __init__(self, connect: str, timeout: float) -> None:
        if KazooClient is None:
            raise ConnectionError("--zookeeper needs kazoo: pip install 'odradek[cluster]'")
        self.zk = KazooClient(hosts=connect, timeout=max(timeout, 1.0))
        try:
            self.zk.start(timeout=timeout)
        except Exception as exc:  # kazoo's timeout is no TimeoutError
            self.close()
            raise ConnectionError(f"cannot connect to ZooKeeper at {connect}: {exc}") from exc

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.zk.stop()
            self.zk.close()

    def _children(self, path: str) -> list[str]:
        try:
            return sorted(self.zk.get_children(path))
        except NoNodeError:
            return []

    def groups(self) -> list[str]:
        return self._children("/consumers")

    def exists(self, group: str) -> bool:
        return self.zk.exists(f"/consumers/{group}") is not None

    def members(self, group: str) -> dict[str, dict[str, Any]]:
        out = {}
        for cid in self._children(f"/consumers/{group}/ids"):
            try:
                raw, _ = self.zk.get(f"/consumers/{group}/ids/{cid}")
                out[cid] = json.loads(raw) if raw else {}
            except (NoNodeError, ValueError):
                continue
        return out

    def offsets(self, group: str) -> dict[tuple[str, int], int]:
        out = {}
        for topic in self._children(f"/consumers/{group}/offsets"):
            for p in self._children(f"/consumers/{group}/offsets/{topic}"):
                with contextlib.suppress(NoNodeError, ValueError):
                    raw, _ = self.zk.get(f"/consumers/{group}/offsets/{topic}/{p}")
                    out[(topic, int(p))] = int(raw.decode().strip())
        return out

    def owners(self, group: str) -> dict[tuple[str, int], str]:
        out = {}
        for topic in self._children(f"/consumers/{group}/owners"):
            for p in self._children(f"/consumers/{group}/owners/{topic}"):
                with contextlib.suppress(NoNodeError):
                    raw, _ = self.zk.get(f"/consumers/{group}/owners/{topic}/{p}")
                    out[(topic, int(p))] = raw.decode()
        return out

    def set_offsets(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        from odradek.client.zk_consumer import write_zk_offset

        for p, o in offsets.items():
            write_zk_offset(self.zk, group, topic, p, o)


def _zk(args: argparse.Namespace) -> _ZkGroups | None:
    return _ZkGroups(args.zookeeper, args.timeout) if getattr(args, "zookeeper", None) else None


def cmd_list(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """``odradek groups list``: every group with its state and protocol type (``--state`` filters), for
    ``run_admin``: writes to ``out`` and returns the exit status; a Kafka error or ValueError raised
    becomes the one-line error and exit status 1."""
    groups = admin.list_groups(args.state or None)
    rows = [["GROUP", "STATE", "PROTOCOL-TYPE"]]
    listed = [(g.group_id, g.state or "", g.protocol_type) for g in groups]
    zk = _zk(args)
    if zk is not None:
        try:
            for gid in zk.groups():
                state = "Stable" if zk.members(gid) else "Empty"
                if not args.state or state in args.state:
                    listed.append((gid, state, "zookeeper"))
        finally:
            zk.close()
    if args.output == "json":
        write_json([{"group_id": g, "state": st, "protocol_type": pt} for g, st, pt in sorted(listed)], out)
        return 0
    rows += [list(r) for r in sorted(listed)]
    _table(rows, out)
    return 0


def _describe_zk(admin: Admin, zk: _ZkGroups, group: str, out: Any, output: str = "table") -> int:
    members = zk.members(group)
    committed = zk.offsets(group)
    owners = zk.owners(group)
    state = "Stable" if members else "Empty"
    if output == "json":
        zk_keys = sorted(set(committed) | set(owners))
        latest = admin.list_offsets(dict.fromkeys(zk_keys, "latest")) if zk_keys else {}
        offsets = []
        for zk_tp in zk_keys:
            zk_cur = committed.get(zk_tp)
            zk_end = latest[zk_tp].offset if zk_tp in latest else None
            zk_lag = None if zk_cur is None or zk_end is None else max(zk_end - zk_cur, 0)
            offsets.append(_offset_json(zk_tp, zk_cur, zk_end, zk_lag, owners.get(zk_tp)))
        write_json(_group_json(group, state, "zookeeper", "", None, [
            {"member_id": m, "group_instance_id": None, "client_id": "", "host": "", "assignment": [
                {"topic": t, "partition": p} for (t, p), owner in sorted(owners.items()) if owner.startswith(m)
            ]} for m in sorted(members)
        ], offsets), out)
        return 0
    out.write(f"Consumer group '{group}' (ZooKeeper-based) is {state} with {len(members)} member(s).\n\n")
    keys = sorted(set(committed) | set(owners))
    ends: dict[tuple[str, int], int] = {}
    if keys:
        found = admin.list_offsets(dict.fromkeys(keys, "latest"))
        ends = {tp: r.offset for tp, r in found.items()}
    rows = [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "OWNER"]]
    for tp in keys:
        cur, end = committed.get(tp), ends.get(tp)
        lag = "-" if cur is None or end is None else str(max(end - cur, 0))
        rows.append([
            group, tp[0], str(tp[1]), "-" if cur is None else str(cur), "-" if end is None else str(end), lag,
            owners.get(tp, "-"),
        ])
    if len(rows) == 1:
        out.write(f"Consumer group '{group}' has no committed offsets and no owned partitions.\n")
    else:
        _table(rows, out)
    return 0


def cmd_describe(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """``odradek groups describe``: a group's members and, per partition, committed offset, log end and lag (a
    ZooKeeper consumers' group with ``--zookeeper``), for ``run_admin``: writes to ``out`` and returns the
    exit status; a Kafka error or ValueError raised becomes the one-line error and exit status 1."""
    group = args.group
    zk = _zk(args)
    if zk is not None:
        try:
            if zk.exists(group):
                return _describe_zk(admin, zk, group, out, args.output)
        finally:
            zk.close()
    g = admin.describe_groups([group])[group]
    if g.state == "Dead":
        if args.output == "json":
            raise ValueError(f"consumer group {group!r} does not exist")
        out.write(f"Consumer group '{group}' does not exist.\n")
        return 1
    lags = admin.group_lag(group)
    consumer = g.group_type == "consumer"
    if args.output == "json":
        members = [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "host": m.host,
                "assignment": [{"topic": t, "partition": p} for t, p in sorted(m.assignment)],
                **({"member_epoch": m.member_epoch,
                    "target_assignment": [{"topic": t, "partition": p} for t, p in sorted(m.target_assignment or [])]}
                   if consumer else {}),
            }
            for m in g.members
        ]
        offsets = [
            _offset_json(tp, lag.committed_offset, lag.log_end_offset, lag.lag,
                         None if lag.member is None else lag.member.member_id)
            for tp, lag in sorted(lags.items())
        ]  # fmt: skip
        coordinator = None if g.coordinator is None else g.coordinator.id
        doc = _group_json(group, g.state, g.protocol_type, g.protocol, coordinator, members, offsets)
        doc["group_type"] = g.group_type
        if consumer:
            doc["group_epoch"], doc["assignment_epoch"] = g.group_epoch, g.assignment_epoch
        write_json(doc, out)
        return 0
    if consumer:
        out.write(f"Consumer group '{group}' (consumer protocol, KIP-848) is {g.state} with {len(g.members)} "
                  f"member(s): group epoch {g.group_epoch}, target assignment epoch {g.assignment_epoch}, "
                  f"assignor {g.protocol}.\n\n")
        _members_table(g.members, out)
    else:
        kind = f"classic protocol, {g.protocol_type or 'offsets only'}" + (f", {g.protocol}" if g.protocol else "")
        out.write(f"Consumer group '{group}' ({kind}) is {g.state} with {len(g.members)} member(s).\n\n")
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


def _members_table(members: list[Any], out: Any) -> None:
    """A consumer group's members: each one's epoch, the partitions it owns and those it is to own
    (the target assignment it reconciles to)."""

    def parts(tps: list[tuple[str, int]] | None) -> str:
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(tps or []):
            by_topic.setdefault(t, []).append(p)
        return ";".join(f"{t}:{','.join(map(str, ps))}" for t, ps in by_topic.items()) or "-"

    rows = [["MEMBER-ID", "EPOCH", "CLIENT-ID", "HOST", "INSTANCE-ID", "ASSIGNMENT", "TARGET-ASSIGNMENT"]]
    for m in sorted(members, key=lambda m: m.member_id):
        rows.append([m.member_id, str(m.member_epoch), m.client_id, m.host, m.group_instance_id or "-",
                     parts(m.assignment), parts(m.target_assignment)])
    _table(rows, out)
    out.write("\n")


def _offset_json(
    tp: tuple[str, int], committed: int | None, end: int | None, lag: int | None, member: str | None
) -> dict[str, Any]:
    return {
        "topic": tp[0],
        "partition": tp[1],
        "committed_offset": committed,
        "log_end_offset": end,
        "lag": lag,
        "member_id": member,
    }


def _group_json(
    group: str,
    state: str,
    protocol_type: str,
    protocol: str,
    coordinator: int | None,
    members: list[dict[str, Any]],
    offsets: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "group_id": group,
        "state": state,
        "protocol_type": protocol_type,
        "protocol": protocol,
        "coordinator": coordinator,
        "members": members,
        "offsets": offsets,
        "total_lag": sum(o["lag"] for o in offsets if o["lag"] is not None),
    }


def _parse_time(text: str) -> int:
    when = dt.datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def cmd_reset(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """``odradek groups reset-offsets``: move a group's committed offsets (to earliest, latest, an offset, a
    time, or by a shift), in Kafka or, with ``--zookeeper``, for a ZooKeeper consumers' group, for
    ``run_admin``: writes to ``out`` and returns the exit status; a Kafka error or ValueError raised
    becomes the one-line error and exit status 1."""
    zk = _zk(args)
    try:
        if zk is not None and not zk.exists(args.group):
            zk.close()
            zk = None
        return _reset(admin, args, out, zk)
    finally:
        if zk is not None:
            zk.close()


def _reset(admin: Admin, args: argparse.Namespace, out: Any, zk: _ZkGroups | None) -> int:
    """Reset a group's offsets: in ZooKeeper (``zk``: a ZooKeeper consumers' group) or Kafka."""
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
        if zk is not None:
            stored = zk.offsets(group)
            current = {p: stored[(topic, p)] for p in parts if (topic, p) in stored}
        else:
            committed = admin.list_group_offsets(group, [(topic, p) for p in parts])
            current = {p: committed[(topic, p)].offset for p in parts if (topic, p) in committed}
        target = {p: current.get(p, latest[p]) + args.shift_by for p in parts}
    target = {p: min(max(o, earliest[p]), latest[p]) for p, o in target.items()}
    if zk is not None:
        state = "Stable" if zk.members(group) else "Empty"
    else:
        state = admin.describe_groups([group])[group].state
    if args.execute and state not in ("Empty", "Dead"):
        out.write(f"Error: assignments can only be reset if the group '{group}' is inactive, but it is {state}.\n")
        return 1
    if args.execute:
        if zk is not None:
            zk.set_offsets(group, topic, target)
        else:
            admin.alter_group_offsets(group, {(topic, p): o for p, o in sorted(target.items())})
    if zk is not None:
        out.write(f"Consumer group '{group}' is ZooKeeper-based: offsets in /consumers/{group}/offsets.\n")
    rows = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]]
    rows += [[group, topic, str(p), str(o)] for p, o in sorted(target.items())]
    _table(rows, out)
    if not args.execute:
        out.write("(dry run: add --execute to commit these offsets)\n")
    return 0


def cmd_delete(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """``odradek groups delete``: DeleteGroups for an empty group, for ``run_admin``: writes to ``out`` and
    returns the exit status; a Kafka error or ValueError raised becomes the one-line error and exit status
    1."""
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


def cmd_delete_offsets(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """``odradek groups delete-offsets``: OffsetDelete for a group's partitions of the topics given, for
    ``run_admin``: writes to ``out`` and returns the exit status; a Kafka error or ValueError raised
    becomes the one-line error and exit status 1."""
    tps: list[tuple[str, int]] = []
    for item in args.topic:
        topic, _, spec = item.partition(":")
        parts = [int(p) for p in spec.split(",")] if spec else _partitions(admin, topic)
        tps += [(topic, p) for p in parts]
    try:
        admin.delete_group_offsets(args.group, tps)
    except KafkaError as exc:
        reason = {
            ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC: "the group is consuming the topic",
            ErrorCode.GROUP_ID_NOT_FOUND: "the group does not exist",
        }.get(exc.code)
        if reason is None:
            raise
        out.write(f"Error: deletion of offsets of consumer group '{args.group}' failed: {reason}.\n")
        return 1
    _table([["TOPIC", "PARTITION", "STATUS"]] + [[t, str(p), "Successful"] for t, p in tps], out)
    return 0


def run(args: argparse.Namespace) -> int:
    """Run ``odradek groups`` for the parsed ``args``; returns the exit status: 0, or 1 with the error on
    stderr."""
    commands = {
        "list": cmd_list, "describe": cmd_describe, "reset-offsets": cmd_reset, "delete": cmd_delete,
        "delete-offsets": cmd_delete_offsets,
    }  # fmt: skip
    return run_admin("groups", commands[args.groups_command], args)
