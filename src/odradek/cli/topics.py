"""``odradek topics``: create, list, describe, alter and delete topics, like Kafka's kafka-topics.

``--bootstrap-server`` (default 127.0.0.1:9092) and ``--timeout`` go before or after the command::

    odradek topics create orders --partitions 3 --config retention.ms=86400000
    odradek topics describe orders --bootstrap-server broker:9092
"""

from __future__ import annotations

import argparse
import base64
import sys
import uuid
from typing import Any

from odradek.cli._common import (
    CONNECT_TIMEOUT,
    add_output_option,
    connect_timeout,
    unreachable_message,
    write_json,
)
from odradek.client import Admin, AdminError, AlterConfigOp, ConfigResource, NewTopic
from odradek.client.admin import ConfigSource, ListOffsetsResultInfo, TopicDescription
from odradek.config import read_properties
from odradek.errors import ErrorCode, KafkaError

__all__ = [
    "add_connect_timeout",
    "add_connection_options",
    "add_parser",
    "check_reachable",
    "kafka_uuid",
    "parse_pairs",
    "run",
    "run_admin",
]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def add_connection_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """``--bootstrap-server`` and ``--timeout``, accepted both before and after the command."""
    suppress = argparse.SUPPRESS
    parser.add_argument(
        "-b",
        "--bootstrap-server",
        default=DEFAULT_BOOTSTRAP if top else suppress,
        help=f"host:port[,host:port] (default {DEFAULT_BOOTSTRAP})",
    )
    parser.add_argument(
        "--timeout", type=float, default=30.0 if top else suppress, help="seconds to wait for each operation (default 30)"
    )
    parser.add_argument(
        "--command-config",
        default=None if top else suppress,
        metavar="FILE",
        help="client configs (security.protocol, ssl.*, sasl.*...) in a properties file, as Kafka's tools take",
    )
    add_connect_timeout(parser, top=top)


def add_connect_timeout(parser: argparse.ArgumentParser, *, top: bool = True) -> None:
    """Add ``--connect-timeout SECONDS`` (how long to wait for any broker to answer) to ``parser``;
    ``top=False`` for a subcommand's copy, which does not override the top-level value."""
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=CONNECT_TIMEOUT if top else argparse.SUPPRESS,
        metavar="SECONDS",
        help=f"give up when no broker answers within this time (default {CONNECT_TIMEOUT:g}, at most --timeout)",
    )


def add_parser(sub: Any) -> None:
    """Add the ``odradek topics`` subcommand (create, list, describe, alter and delete topics, like kafka-
    topics) and its options to the top-level subparsers ``sub``."""
    p = sub.add_parser(
        "topics",
        help="create, list, describe, alter and delete topics",
        description="Create, list, describe, alter and delete topics (like kafka-topics).",
    )
    add_connection_options(p, top=True)
    tsub = p.add_subparsers(dest="topics_command", required=True, metavar="COMMAND")

    def command(name: str, help: str, *, named: bool = True, required: bool = True) -> argparse.ArgumentParser:
        c: argparse.ArgumentParser = tsub.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".")
        if named:
            c.add_argument("name", nargs="?", metavar="NAME", help="the topic" + ("" if required else " (default: every topic)"))
            c.add_argument("--topic", dest="topic_option", metavar="NAME", help="the topic (as kafka-topics spells it)")
        add_connection_options(c, top=False)
        return c

    c = command("create", "create a topic")
    c.add_argument("--partitions", type=int, default=-1, help="number of partitions (default: the broker's num.partitions)")
    c.add_argument(
        "--replication-factor", type=int, default=-1, help="replicas per partition (default: default.replication.factor)"
    )
    c.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="a topic config (repeatable)")
    c.add_argument("--if-not-exists", action="store_true", help="succeed when the topic already exists")
    c.add_argument("--validate-only", action="store_true", help="check the request without creating the topic")

    ls = command("list", "list topics", named=False)
    ls.add_argument("--exclude-internal", action="store_true", help="leave out internal topics (__consumer_offsets)")
    add_output_option(ls)

    d = command("describe", "partitions (leader, replicas, ISR, earliest and latest offsets) and configs", required=False)
    d.add_argument("--exclude-internal", action="store_true", help="leave out internal topics")
    add_output_option(d)

    a = command("alter", "add partitions to a topic or change its configs")
    a.add_argument("--partitions", type=int, help="the new total number of partitions")
    a.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="set a topic config (repeatable)")
    a.add_argument("--delete-config", action="append", default=[], metavar="KEY", help="remove a config override (repeatable)")
    a.add_argument("--if-exists", action="store_true", help="succeed when the topic does not exist")

    rm = command("delete", "delete a topic and its data")
    rm.add_argument("--if-exists", action="store_true", help="succeed when the topic does not exist")


def parse_pairs(items: list[str], option: str) -> dict[str, str]:
    """``KEY=VALUE`` arguments of ``option`` (``--config``) as a dict; ValueError naming the option for an
    item without ``=`` or key."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{option} expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def _name(args: argparse.Namespace, required: bool = True) -> str | None:
    name = args.name or args.topic_option
    if args.name and args.topic_option and args.name != args.topic_option:
        raise ValueError(f"two different topics given: {args.name!r} and {args.topic_option!r}")
    if name is None and required:
        raise ValueError("a topic name is required (NAME or --topic NAME)")
    return name


def kafka_uuid(value: uuid.UUID) -> str:
    """A topic id as Kafka prints it: URL-safe base64 of the 16 bytes, unpadded."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def _missing(exc: KafkaError) -> bool:
    return exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def cmd_create(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """``odradek topics create``: CreateTopics with the partitions, replication factor and ``--config`` given,
    for ``run_admin``: writes to ``out`` and returns the exit status; a Kafka error or ValueError raised
    becomes the one-line error and exit status 1."""
    name = _name(args)
    assert name is not None
    topic = NewTopic(name, args.partitions, args.replication_factor, parse_pairs(args.config, "--config"))
    try:
        admin.create_topics([topic], validate_only=args.validate_only, timeout=args.timeout)
    except KafkaError as exc:
        if args.if_not_exists and exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:
            return 0
        raise
    out.write(f"{'Validated' if args.validate_only else 'Created'} topic {name}.\n")
    return 0


def cmd_list(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """``odradek topics list``: the topic names (internal ones unless ``--exclude-internal``), for
    ``run_admin``: writes to ``out`` and returns the exit status; a Kafka error or ValueError raised
    becomes the one-line error and exit status 1."""
    listed = admin.list_topics(include_internal=not args.exclude_internal, timeout=args.timeout)
    if args.output == "json":
        write_json(
            [
                {
                    "name": t.name,
                    "topic_id": None if t.topic_id is None else kafka_uuid(t.topic_id),
                    "internal": t.internal,
                }
                for t in listed.values()
            ],
            out,
        )
        return 0
    for name in listed:
        out.write(name + "\n")
    return 0


def _offsets(
    admin: Admin, specs: dict[tuple[str, int], str], timeout: float
) -> dict[tuple[str, int], ListOffsetsResultInfo]:
    """Offsets of the partitions that answer (a partition without a leader shows none)."""
    if not specs:
        return {}
    try:
        return admin.list_offsets(specs, timeout=timeout)
    except AdminError as exc:
        return exc.results


def cmd_describe(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """``odradek topics describe``: partitions, leaders, replicas, ISR and configs of one topic or all, for
    ``run_admin``: writes to ``out`` and returns the exit status; a Kafka error or ValueError raised
    becomes the one-line error and exit status 1."""
    name = _name(args, required=False)
    if name is not None:
        topics = admin.describe_topics([name], timeout=args.timeout)
    else:
        topics = admin.describe_topics(None, timeout=args.timeout)
        if args.exclude_internal:
            topics = {n: t for n, t in topics.items() if not t.internal}
    if not topics:
        if args.output == "json":
            write_json([], out)
        return 0
    resources = {n: ConfigResource("topic", n) for n in topics}
    configs = admin.describe_configs(list(resources.values()), include_synonyms=False, timeout=args.timeout)
    tps = [(n, p.partition) for n, t in topics.items() for p in t.partitions]
    earliest = _offsets(admin, dict.fromkeys(tps, "earliest"), args.timeout)
    latest = _offsets(admin, dict.fromkeys(tps, "latest"), args.timeout)
    if args.output == "json":
        write_json([_topic_json(t, configs[resources[n]], earliest, latest) for n, t in topics.items()], out)
        return 0
    for n, t in topics.items():
        overrides = [
            f"{e.name}={e.value}"
            for e in configs[resources[n]].values()
            if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG
        ]
        _describe_topic(t, ",".join(overrides), earliest, latest, out)
    return 0


def _topic_json(
    t: TopicDescription,
    configs: Any,
    earliest: dict[tuple[str, int], ListOffsetsResultInfo],
    latest: dict[tuple[str, int], ListOffsetsResultInfo],
) -> dict[str, Any]:
    def offset(found: dict[tuple[str, int], ListOffsetsResultInfo], p: int) -> int | None:
        r = found.get((t.name, p))
        return None if r is None else r.offset

    return {
        "name": t.name,
        "topic_id": None if t.topic_id is None else kafka_uuid(t.topic_id),
        "internal": t.internal,
        "partition_count": len(t.partitions),
        "replication_factor": t.replication_factor,
        "configs": {
            e.name: e.value for e in configs.values() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG
        },
        "partitions": [
            {
                "partition": p.partition,
                "leader": p.leader if p.leader >= 0 else None,
                "leader_epoch": p.leader_epoch,
                "replicas": list(p.replicas),
                "isr": list(p.isr),
                "offline_replicas": list(p.offline_replicas),
                "earliest_offset": offset(earliest, p.partition),
                "latest_offset": offset(latest, p.partition),
            }
            for p in t.partitions
        ],
    }


def _describe_topic(
    t: TopicDescription,
    overrides: str,
    earliest: dict[tuple[str, int], ListOffsetsResultInfo],
    latest: dict[tuple[str, int], ListOffsetsResultInfo],
    out: Any,
) -> None:
    def ids(xs: list[int]) -> str:
        return ",".join(map(str, xs))

    def offset(found: dict[tuple[str, int], ListOffsetsResultInfo], p: int) -> str:
        r = found.get((t.name, p))
        return "-" if r is None else str(r.offset)

    head = [
        f"Topic: {t.name}",
        f"TopicId: {kafka_uuid(t.topic_id) if t.topic_id is not None else '-'}",
        f"PartitionCount: {len(t.partitions)}",
        f"ReplicationFactor: {t.replication_factor}",
        f"Configs: {overrides}",
    ]
    if t.internal:
        head.insert(4, "Internal: true")
    out.write("\t".join(head) + "\n")
    for p in t.partitions:
        row = [
            f"Topic: {t.name}",
            f"Partition: {p.partition}",
            f"Leader: {p.leader if p.leader >= 0 else 'none'}",
            f"Replicas: {ids(p.replicas)}",
            f"Isr: {ids(p.isr)}",
        ]
        if p.offline_replicas:
            row.append(f"Offline: {ids(p.offline_replicas)}")
        row += [f"EarliestOffset: {offset(earliest, p.partition)}", f"LatestOffset: {offset(latest, p.partition)}"]
        out.write("\t" + "\t".join(row) + "\n")


def cmd_alter(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """``odradek topics alter``: change a topic's configs or add partitions, for ``run_admin``: writes to
    ``out`` and returns the exit status; a Kafka error or ValueError raised becomes the one-line error and
    exit status 1."""
    name = _name(args)
    assert name is not None
    sets = parse_pairs(args.config, "--config")
    if args.partitions is None and not sets and not args.delete_config:
        raise ValueError("nothing to alter: give --partitions, --config or --delete-config")
    done = []
    try:
        if args.partitions is not None:
            before = len(admin.describe_topics([name], timeout=args.timeout)[name].partitions)
            admin.create_partitions({name: args.partitions}, timeout=args.timeout)
            done.append(f"partitions {before} -> {args.partitions}")
        if sets or args.delete_config:
            ops = [AlterConfigOp.set(k, v) for k, v in sets.items()]
            ops += [AlterConfigOp.delete(k) for k in args.delete_config]
            admin.incremental_alter_configs({ConfigResource("topic", name): ops}, timeout=args.timeout)
            done += [f"{k}={v}" for k, v in sets.items()]
            done += [f"{k} deleted" for k in args.delete_config]
    except KafkaError as exc:
        if args.if_exists and _missing(exc) and not done:
            return 0
        raise
    out.write(f"Altered topic {name}: {', '.join(done)}.\n")
    return 0


def cmd_delete(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """``odradek topics delete``: DeleteTopics for one topic, for ``run_admin``: writes to ``out`` and returns
    the exit status; a Kafka error or ValueError raised becomes the one-line error and exit status 1."""
    name = _name(args)
    assert name is not None
    try:
        admin.delete_topics([name], timeout=args.timeout)
    except KafkaError as exc:
        if args.if_exists and _missing(exc):
            return 0
        raise
    out.write(f"Deleted topic {name}.\n")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run ``odradek topics`` for the parsed ``args``; returns the exit status: 0, or 1 with the error on
    stderr."""
    commands = {"create": cmd_create, "list": cmd_list, "describe": cmd_describe, "alter": cmd_alter, "delete": cmd_delete}
    return run_admin("topics", commands[args.topics_command], args)


def command_config(args: argparse.Namespace) -> dict[str, str]:
    """The client configs of ``--command-config FILE`` (a properties file), or none."""
    path = getattr(args, "command_config", None)
    if not path:
        return {}
    try:
        return read_properties(path)
    except OSError as exc:
        raise ValueError(f"--command-config {path}: {exc.strerror or exc}") from None


def check_reachable(admin: Admin, args: argparse.Namespace) -> str | None:
    """None when a broker answers within the connect timeout, else the one message to print."""
    seconds = connect_timeout(args)
    try:
        admin.describe_cluster(timeout=seconds)
    except KafkaError as exc:
        if exc.code != ErrorCode.REQUEST_TIMED_OUT:
            return None  # a broker answered (an old one without DescribeCluster, say): the command says the rest
        return unreachable_message(args.bootstrap_server, seconds, exc.message or str(exc))
    except (ConnectionError, TimeoutError, OSError) as exc:
        return unreachable_message(args.bootstrap_server, seconds, str(exc) or type(exc).__name__)
    return None


def run_admin(tool: str, command: Any, args: argparse.Namespace) -> int:
    """Run ``command(admin, args, stdout)``; a failure is one line on stderr and exit code 1."""
    try:
        admin = Admin(
            {
                **command_config(args),
                "bootstrap.servers": args.bootstrap_server,
                "client.id": f"odradek-{tool}",
                "default.api.timeout.ms": int(args.timeout * 1000),
                "request.timeout.ms": int(args.timeout * 1000),
            }
        )
    except (ValueError, OSError) as exc:
        print(f"odradek {tool}: {exc}", file=sys.stderr)
        return 1
    try:
        unreachable = check_reachable(admin, args)
        if unreachable is not None:
            print(f"odradek {tool}: {unreachable}", file=sys.stderr)
            return 1
        code: int = command(admin, args, sys.stdout)
        return code
    except BrokenPipeError:
        raise  # the reader of our output went away (``| head``): the entry point handles it
    except (KafkaError, ConnectionError, TimeoutError, ValueError) as exc:
        print(f"odradek {tool}: {exc}", file=sys.stderr)
        return 1
    finally:
        admin.close()
