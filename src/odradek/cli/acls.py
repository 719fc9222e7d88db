"""``odradek acls``: add, remove and list ACLs, with kafka-acls' options.

::

    odradek acls add --allow-principal User:alice --operation Read --operation Describe --topic orders
    odradek acls add --allow-principal User:bob --producer --topic logs- --resource-pattern-type prefixed
    odradek acls add --allow-principal User:carol --consumer --topic orders --group billing
    odradek acls add --deny-principal User:mallory --operation All --topic '*'
    odradek acls list --topic orders
    odradek acls list --principal User:alice --output json
    odradek acls remove --allow-principal User:alice --operation Read --topic orders

Through a broker (``--bootstrap-server``, ``--command-config`` for a secured listener) whose
principal has Alter on the cluster (Describe to list).  ``--producer`` is Write, Describe and
Create on the topics (and IdempotentWrite on the cluster with ``--idempotent``, Write and
Describe on ``--transactional-id``); ``--consumer`` is Read and Describe on the topics and Read on
the ``--group``.  ``remove`` and ``list`` without principals or operations match them all.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
from typing import Any

from odradek.cli.topics import add_connection_options, run_admin
from odradek.client import Admin
from odradek.errors import KafkaError
from odradek.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclError,
    Operation,
    PatternType,
    PermissionType,
    ResourceType,
)

__all__ = ["add_parser", "run"]

_OPERATIONS = [o.title for o in Operation if o not in (Operation.UNKNOWN, Operation.ANY)]


def add_parser(sub: Any) -> None:
    """Add the ``odradek acls`` subcommand (add, remove and list ACLs) and its options to the top-level
    subparsers ``sub``."""
    p = sub.add_parser(
        "acls",
        help="add, remove and list ACLs",
        description="Add, remove and list ACLs (like kafka-acls).",
    )
    add_connection_options(p, top=True)
    p.add_argument(
        "--zookeeper", metavar="HOST:PORT[/CHROOT]",
        help="read and write the ACLs in ZooKeeper directly (no broker needed: before a cluster's first start)",
    )
    asub = p.add_subparsers(dest="acls_command", required=True, metavar="COMMAND")
    add = asub.add_parser("add", help="add ACLs", description="Add ACLs for principals on resources.")
    rm = asub.add_parser("remove", help="remove ACLs", description="Remove the ACLs that match.")
    lst = asub.add_parser("list", help="list ACLs", description="List the ACLs that match.")
    for c in (add, rm, lst):
        add_connection_options(c, top=False)
        c.add_argument("--topic", action="append", default=[], metavar="NAME", help="a topic (repeatable; '*': all)")
        c.add_argument("--group", action="append", default=[], metavar="NAME", help="a consumer group (repeatable)")
        c.add_argument("--cluster", action="store_true", help="the cluster")
        c.add_argument("--transactional-id", action="append", default=[], metavar="ID", help="a transactional id")
        c.add_argument("--user-principal", action="append", default=[], metavar="NAME",
                       help="a User resource (for delegation tokens)")
        c.add_argument(
            "--resource-pattern-type", default=None, type=str.lower,
            choices=("literal", "prefixed", "any", "match"),
            help="how resource names match (add: literal or prefixed, default literal; remove/list: also any or "
            "match, default literal for remove and any for list)",
        )
    for c in (add, rm):
        c.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL", help="e.g. User:alice")
        c.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL")
        c.add_argument("--allow-host", action="append", default=[], metavar="HOST", help="default '*'")
        c.add_argument("--deny-host", action="append", default=[], metavar="HOST", help="default '*'")
        c.add_argument("--operation", action="append", default=[], metavar="OP", help=f"one of {', '.join(_OPERATIONS)}")
        c.add_argument("--producer", action="store_true", help="the ACLs a producer needs")
        c.add_argument("--consumer", action="store_true", help="the ACLs a consumer needs (with --group)")
        c.add_argument("--idempotent", action="store_true", help="with --producer: IdempotentWrite on the cluster")
    lst.add_argument("--principal", action="append", default=[], metavar="PRINCIPAL", help="only this principal's")
    lst.add_argument("--output", choices=("table", "json"), default="table")


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, t) for t in args.topic]
    out += [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    out += [(ResourceType.USER, u) for u in args.user_principal]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _pattern(args: argparse.Namespace, default: str) -> PatternType:
    return PatternType.parse(args.resource_pattern_type or default)


def _entries(args: argparse.Namespace) -> list[tuple[str, str, PermissionType]]:
    """(principal, host, permission) for the --allow-/--deny- options."""
    out = []
    for principals, hosts, permission in (
        (args.allow_principal, args.allow_host or ["*"], PermissionType.ALLOW),
        (args.deny_principal, args.deny_host or ["*"], PermissionType.DENY),
    ):
        for p in principals:
            if ":" not in p:
                raise ValueError(f"principal {p!r} is not of the form Type:name (e.g. User:alice)")
            out += [(p, h, permission) for h in hosts]
    return out


def _operations(args: argparse.Namespace, rtype: ResourceType) -> list[Operation]:
    """The operations asked for on a resource of ``rtype`` (shortcuts included)."""
    ops: list[Operation] = [Operation.parse(o) for o in args.operation]
    if args.producer:
        if rtype is ResourceType.TOPIC:
            ops += [Operation.WRITE, Operation.DESCRIBE, Operation.CREATE]
        elif rtype is ResourceType.TRANSACTIONAL_ID:
            ops += [Operation.WRITE, Operation.DESCRIBE]
        elif rtype is ResourceType.CLUSTER and args.idempotent:
            ops.append(Operation.IDEMPOTENT_WRITE)
    if args.consumer:
        if rtype is ResourceType.TOPIC:
            ops += [Operation.READ, Operation.DESCRIBE]
        elif rtype is ResourceType.GROUP:
            ops.append(Operation.READ)
    return list(dict.fromkeys(ops))


def _bindings(args: argparse.Namespace) -> list[AclBinding]:
    if args.consumer and not args.group:
        raise ValueError("--consumer needs --group")
    resources = _resources(args)
    if args.producer and args.idempotent and not args.cluster:
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
    if not resources:
        raise ValueError("name at least one resource: --topic, --group, --cluster, --transactional-id or --user-principal")
    entries = _entries(args)
    if not entries:
        raise ValueError("name at least one principal: --allow-principal or --deny-principal")
    pattern = _pattern(args, "literal")
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise ValueError("ACLs are added with --resource-pattern-type literal or prefixed")
    out = []
    for rtype, name in resources:
        ops = _operations(args, rtype)
        if not ops and not (args.producer or args.consumer):
            raise ValueError("name at least one --operation (or use --producer / --consumer)")
        for op in ops:
            for principal, host, permission in entries:
                b = AclBinding(
                    rtype, name, pattern if rtype is not ResourceType.CLUSTER else PatternType.LITERAL,
                    principal, host, op, permission,
                )
                b.validate()
                out.append(b)
    return out


def _filters(args: argparse.Namespace, default_pattern: str) -> list[AclBindingFilter]:
    resources: list[tuple[ResourceType, str | None]] = list(_resources(args)) or [(ResourceType.ANY, None)]
    pattern = _pattern(args, default_pattern)
    principals: list[tuple[str | None, str | None, PermissionType]] = []
    if args.acls_command == "list":
        principals = [(p, None, PermissionType.ANY) for p in args.principal] or [(None, None, PermissionType.ANY)]
    else:
        principals = [(p, h, perm) for p, h, perm in _entries(args)] or [(None, None, PermissionType.ANY)]
        if not args.allow_host and not args.deny_host:
            principals = [(p, None, perm) for p, _h, perm in principals]
    out = []
    for rtype, name in resources:
        ops: list[Operation] = [Operation.ANY]
        if args.acls_command == "remove" and rtype is not ResourceType.ANY:
            ops = _operations(args, rtype) or ([Operation.ANY] if not (args.producer or args.consumer) else [])
        for op in ops:
            for principal, host, permission in principals:
                out.append(AclBindingFilter(rtype, name, pattern, principal, host, op, permission))
    return out


def _row(b: AclBinding) -> dict[str, str]:
    return {
        "resource_type": b.resource_type.title, "pattern_type": b.pattern_type.title, "name": b.name,
        "principal": b.principal, "host": b.host, "operation": b.operation.title, "permission": b.permission.title,
    }


def _print(bindings: list[AclBinding], output: str, out: Any) -> None:
    rows = [_row(b) for b in sorted(bindings, key=lambda b: (b.resource, b.entry))]
    if output == "json":
        out.write(json.dumps(rows, indent=2) + "\n")
        return
    cols = ["resource_type", "pattern_type", "name", "principal", "host", "operation", "permission"]
    heads = ["RESOURCE TYPE", "PATTERN", "NAME", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"]
    widths = [max([len(h)] + [len(r[c]) for r in rows]) for c, h in zip(cols, heads, strict=True)]
    out.write("  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip() + "\n")
    for r in rows:
        out.write("  ".join(r[c].ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip() + "\n")


def cmd_broker(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """``odradek acls add|remove|list`` through the admin API (CreateAcls, DeleteAcls, DescribeAcls), for
    ``run_admin``: writes to ``out`` and returns the exit status; a Kafka error or ValueError raised
    becomes the one-line error and exit status 1."""
    try:
        if args.acls_command == "add":
            bindings = _bindings(args)
            admin.create_acls(bindings, timeout=args.timeout)
            out.write(f"Added {len(bindings)} ACL bindings:\n")
            _print(bindings, "table", out)
        elif args.acls_command == "remove":
            removed = admin.delete_acls(_filters(args, "literal"), timeout=args.timeout)
            out.write(f"Removed {len(removed)} ACL bindings:\n")
            _print(removed, "table", out)
        else:
            found: list[AclBinding] = []
            for f in _filters(args, "any"):
                found += [b for b in admin.describe_acls(f, timeout=args.timeout) if b not in found]
            _print(found, args.output, out)
    except AclError as exc:
        raise ValueError(str(exc)) from None
    return 0


def _zookeeper(args: argparse.Namespace, out: Any) -> int:
    from odradek.coordination.zookeeper import zk_acls, zk_alter_acls

    connect = args.zookeeper
    if args.acls_command == "add":
        bindings = _bindings(args)
        by_resource: dict[tuple[str, str, str], set[tuple[str, str, str, str]]] = {}
        for b in bindings:
            by_resource.setdefault(b.resource, set()).add(b.entry)
        asyncio.run(zk_alter_acls(connect, {
            r: functools.partial(lambda before, new: before | new, new=frozenset(es)) for r, es in by_resource.items()
        }))
        out.write(f"Added {len(bindings)} ACL bindings in ZooKeeper:\n")
        _print(bindings, "table", out)
        return 0
    stored = asyncio.run(zk_acls(connect))
    filters = _filters(args, "literal" if args.acls_command == "remove" else "any")
    matched = [
        b for r, es in stored.items() for e in es
        if any(f.matches(b := AclBinding.from_stored(r, e)) for f in filters)
    ]
    if args.acls_command == "list":
        _print(matched, args.output, out)
        return 0
    gone: dict[tuple[str, str, str], frozenset[tuple[str, str, str, str]]] = {}
    for b in matched:
        gone[b.resource] = gone.get(b.resource, frozenset()) | {b.entry}
    asyncio.run(zk_alter_acls(connect, {
        r: functools.partial(lambda before, drop: before - drop, drop=es) for r, es in gone.items()
    }))
    out.write(f"Removed {len(matched)} ACL bindings in ZooKeeper:\n")
    _print(matched, "table", out)
    return 0


def run(args: argparse.Namespace) -> int:
    """Run ``odradek acls`` for the parsed ``args``; through the brokers' admin API, or with ``--zookeeper``
    straight in ZooKeeper.  Returns the exit status: 0, or 1 with the error on stderr."""
    if args.zookeeper:
        try:
            return _zookeeper(args, sys.stdout)
        except (OSError, ValueError, TimeoutError, AclError, KafkaError) as exc:
            print(f"odradek acls: {exc}", file=sys.stderr)
            return 1
    return run_admin("acls", cmd_broker, args)
