"""``odradek configs``: describe and change topic and broker configs, like Kafka's kafka-configs.

::

    odradek configs describe --topic orders            # the topic's overrides (--all: every config)
    odradek configs describe --broker 0 --all
    odradek configs alter --topic orders --set retention.ms=86400000 --delete segment.ms
    odradek configs alter --topic orders --add-config 'cleanup.policy=[compact,delete],retention.ms=1000'

``alter`` changes configs one by one (IncrementalAlterConfigs): ``--set``, ``--delete``, and for
list configs ``--append`` / ``--subtract``; kafka-configs' ``--add-config`` and
``--delete-config`` (comma-separated, ``[a,b]`` for a list value) are accepted too.
"""

from __future__ import annotations

import argparse
from typing import Any

from odradek.cli.topics import add_connection_options, parse_pairs, run_admin
from odradek.client import Admin, AlterConfigOp, ConfigResource
from odradek.client.admin import ConfigEntry, ConfigSource

__all__ = ["add_parser", "run"]

_DYNAMIC = {
    "topic": {ConfigSource.DYNAMIC_TOPIC_CONFIG},
    "broker": {ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG},
    "broker-defaults": {ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG},
}


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "configs",
        help="describe and change topic and broker configs",
        description="Describe and change topic and broker configs (like kafka-configs).",
    )
    add_connection_options(p, top=True)
    csub = p.add_subparsers(dest="configs_command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        c: argparse.ArgumentParser = csub.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".")
        entity = c.add_mutually_exclusive_group(required=True)
        entity.add_argument("--topic", metavar="NAME", help="a topic")
        entity.add_argument("--broker", metavar="ID", help="a broker, by id")
        entity.add_argument("--broker-defaults", action="store_true", help="the cluster-wide default broker configs")
        add_connection_options(c, top=False)
        return c

    d = command("describe", "show the configs of a topic or broker (overrides only, unless --all)")
    d.add_argument("--all", action="store_true", help="every config, with its value and where it comes from")

    a = command("alter", "set, delete, append to or subtract from configs of a topic or broker")
    a.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="set a config (repeatable)")
    a.add_argument("--delete", action="append", default=[], metavar="KEY", help="remove an override (repeatable)")
    a.add_argument("--append", action="append", default=[], metavar="KEY=VALUE", help="add to a list config")
    a.add_argument("--subtract", action="append", default=[], metavar="KEY=VALUE", help="remove from a list config")
    a.add_argument(
        "--add-config", action="append", default=[], metavar="K=V,K2=[A,B]", help="kafka-configs syntax for --set"
    )
    a.add_argument("--delete-config", action="append", default=[], metavar="K,K2", help="kafka-configs syntax for --delete")
    a.add_argument("--validate-only", action="store_true", help="check the change without applying it")


def _resource(args: argparse.Namespace) -> tuple[ConfigResource, str, str]:
    """The resource, its kind (for _DYNAMIC) and how to name it in output."""
    if args.topic is not None:
        return ConfigResource("topic", args.topic), "topic", f"topic {args.topic}"
    if args.broker is not None:
        if not args.broker.isdigit():
            raise ValueError(f"--broker expects a broker id, got {args.broker!r}")
        return ConfigResource("broker", args.broker), "broker", f"broker {args.broker}"
    return ConfigResource("broker", ""), "broker-defaults", "brokers in the cluster"


def split_kafka_configs(text: str) -> dict[str, str]:
    """kafka-configs' ``k1=v1,k2=[a,b]``: commas separate entries except inside brackets."""
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(depth - 1, 0)
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    out = parse_pairs([p for p in parts if p.strip()], "--add-config")
    return {k: v[1:-1] if v.startswith("[") and v.endswith("]") else v for k, v in out.items()}


def _synonyms(e: ConfigEntry) -> str:
    return "{" + ", ".join(f"{s.source.name}:{s.name}={s.value if s.value is not None else ''}" for s in e.synonyms) + "}"


def cmd_describe(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    resource, kind, label = _resource(args)
    entries = admin.describe_configs([resource], timeout=args.timeout)[resource]
    if args.all:
        shown = list(entries.values())
        out.write(f"All configs for {label} are:\n")
    else:
        shown = [e for e in entries.values() if e.source in _DYNAMIC[kind]]
        heading = "Default configs" if kind == "broker-defaults" else "Dynamic configs"
        out.write(f"{heading} for {label} are:\n")
    for e in sorted(shown, key=lambda e: e.name):
        value = "" if e.value is None else ("<sensitive>" if e.is_sensitive else e.value)
        extra = f" source={e.source.name}" if args.all else ""
        out.write(f"  {e.name}={value} sensitive={str(e.is_sensitive).lower()}{extra} synonyms={_synonyms(e)}\n")
    return 0


def cmd_alter(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    resource, _kind, label = _resource(args)
    ops = [AlterConfigOp.set(k, v) for k, v in parse_pairs(args.set, "--set").items()]
    for text in args.add_config:
        ops += [AlterConfigOp.set(k, v) for k, v in split_kafka_configs(text).items()]
    ops += [AlterConfigOp.delete(k) for k in args.delete]
    ops += [AlterConfigOp.delete(k.strip()) for text in args.delete_config for k in text.split(",") if k.strip()]
    ops += [AlterConfigOp.append(k, v) for k, v in parse_pairs(args.append, "--append").items()]
    ops += [AlterConfigOp.subtract(k, v) for k, v in parse_pairs(args.subtract, "--subtract").items()]
    if not ops:
        raise ValueError("nothing to alter: give --set, --delete, --append or --subtract")
    admin.incremental_alter_configs({resource: ops}, validate_only=args.validate_only, timeout=args.timeout)
    if args.validate_only:
        out.write(f"Validated the config change for {label}.\n")
    else:
        out.write(f"Completed updating config for {label}.\n")
    return 0


def run(args: argparse.Namespace) -> int:
    commands = {"describe": cmd_describe, "alter": cmd_alter}
    return run_admin("configs", commands[args.configs_command], args)
