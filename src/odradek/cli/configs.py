"""``odradek configs``: describe and change topic and broker configs, like Kafka's kafka-configs.

::

    odradek configs describe --topic orders            # the topic's overrides (--all: every config)
    odradek configs describe --broker 0 --all
    odradek configs alter --topic orders --set retention.ms=86400000 --delete segment.ms
    odradek configs alter --topic orders --add-config 'cleanup.policy=[compact,delete],retention.ms=1000'

``alter`` changes configs one by one (IncrementalAlterConfigs): ``--set``, ``--delete``, and for
list configs ``--append`` / ``--subtract``; kafka-configs' ``--add-config`` and
``--delete-config`` (comma-separated, ``[a,b]`` for a list value) are accepted too.

Client quotas (DescribeClientQuotas / AlterClientQuotas), with kafka-configs' options::

    odradek configs --entity-type users --entity-name alice --alter --add-config producer_byte_rate=1048576
    odradek configs --entity-type users --entity-name alice --entity-type clients --entity-name app \
        --alter --add-config consumer_byte_rate=2097152 --delete-config producer_byte_rate
    odradek configs --entity-type clients --entity-default --describe
    odradek configs describe --user alice          # --client, --user-defaults, --client-defaults too

Client-metrics subscriptions (KIP-714: which metrics matching clients push, how often)::

    odradek configs --entity-type client-metrics --entity-name basic --alter \
        --add-config 'metrics=[org.apache.kafka.producer.,org.apache.kafka.consumer.],interval.ms=60000,match=[client_id=app-.*]'
    odradek configs --entity-type client-metrics --entity-name basic --describe

Group configs (resource type GROUP: a share group's ``share.auto.offset.reset``,
``share.record.lock.duration.ms``, ...; the group need not exist yet)::

    odradek configs alter --group workers --set share.auto.offset.reset=earliest
    odradek configs --entity-type groups --entity-name workers --describe --all
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from odradek.cli._common import add_output_option, write_json
from odradek.cli.topics import add_connection_options, parse_pairs, run_admin
from odradek.client import Admin, AlterConfigOp, ConfigResource
from odradek.client.admin import SPECIFIED, ClientQuotaEntity, ConfigEntry, ConfigSource
from odradek.config import BROKER_CONFIGS, TOPIC_KEYS

__all__ = ["add_parser", "run"]

_DYNAMIC = {
    "topic": {ConfigSource.DYNAMIC_TOPIC_CONFIG},
    "broker": {ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG},
    "broker-defaults": {ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG},
    "client-metrics": {ConfigSource.CLIENT_METRICS_CONFIG},
    "group": {ConfigSource.GROUP_CONFIG},
}


def add_parser(sub: Any) -> None:
    """Add the ``odradek configs`` subcommand (describe and change topic and broker configs, also in kafka-
    configs' ``--describe`` / ``--alter`` style) and its options to the top-level subparsers ``sub``."""
    p = sub.add_parser(
        "configs",
        help="describe and change topic and broker configs",
        description="Describe and change topic and broker configs (like kafka-configs).",
    )
    add_connection_options(p, top=True)
    _add_entity_options(p, top=True)
    p.add_argument(
        "--describe", action="store_true", help="kafka-configs style: describe the entity's configs"
    )
    p.add_argument("--alter", action="store_true", help="kafka-configs style: alter the entity's configs")
    add_output_option(p)
    p.add_argument(
        "--add-config",
        dest="top_add_config",
        action="append",
        default=[],
        metavar="K=V,K2=V2",
        help="with --alter: configs or quotas to set",
    )
    p.add_argument(
        "--delete-config",
        dest="top_delete_config",
        action="append",
        default=[],
        metavar="K,K2",
        help="with --alter: configs or quotas to remove",
    )
    csub = p.add_subparsers(dest="configs_command", required=False, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        c: argparse.ArgumentParser = csub.add_parser(
            name, help=help, description=help[0].upper() + help[1:] + "."
        )
        entity = c.add_mutually_exclusive_group(required=False)
        entity.add_argument("--topic", metavar="NAME", help="a topic")
        entity.add_argument("--broker", metavar="ID", help="a broker, by id")
        entity.add_argument(
            "--client-metrics", metavar="NAME", help="a client-metrics (telemetry) subscription, by name"
        )
        entity.add_argument("--group", metavar="ID", help="a group (its group configs), by id")
        entity.add_argument(
            "--broker-defaults", action="store_true", help="the cluster-wide default broker configs"
        )
        _add_entity_options(c, top=False)
        add_connection_options(c, top=False)
        return c

    d = command("describe", "show the configs of a topic or broker (overrides only, unless --all)")
    d.add_argument("--all", action="store_true", help="every config, with its value and where it comes from")
    add_output_option(d)

    a = command("alter", "set, delete, append to or subtract from configs of a topic or broker")
    a.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="set a config (repeatable)"
    )
    a.add_argument(
        "--delete", action="append", default=[], metavar="KEY", help="remove an override (repeatable)"
    )
    a.add_argument("--append", action="append", default=[], metavar="KEY=VALUE", help="add to a list config")
    a.add_argument(
        "--subtract", action="append", default=[], metavar="KEY=VALUE", help="remove from a list config"
    )
    a.add_argument(
        "--add-config",
        action="append",
        default=[],
        metavar="K=V,K2=[A,B]",
        help="kafka-configs syntax for --set",
    )
    a.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="K,K2",
        help="kafka-configs syntax for --delete",
    )
    a.add_argument("--validate-only", action="store_true", help="check the change without applying it")


class _Entity(argparse.Action):
    """kafka-configs' entity options, kept in command-line order (``--entity-type users
    --entity-name alice --entity-type clients --entity-default`` pairs each type with the name
    after it); ``--user NAME`` and the like are shorthands."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None) -> None:
        spec = list(getattr(namespace, "entities", None) or [])
        spec.append((self.const, values))
        namespace.entities = spec


_SHORTHANDS = {
    "--user": "users",
    "--client": "clients",
    "--ip": "ips",
    "--user-defaults": "users",
    "--client-defaults": "clients",
    "--ip-defaults": "ips",
}
_ENTITY_TYPES = ("users", "clients", "ips", "topics", "brokers", "client-metrics", "groups")
_QUOTA_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}


def _add_entity_options(p: argparse.ArgumentParser, *, top: bool) -> None:
    if top:
        p.set_defaults(entities=[])
    p.add_argument(
        "--entity-type",
        action=_Entity,
        const="type",
        choices=_ENTITY_TYPES,
        help="users, clients, ips (client quotas), topics, brokers, client-metrics (KIP-714 telemetry "
        "subscriptions) or groups (group configs) (kafka-configs syntax)",
    )
    p.add_argument(
        "--entity-name",
        action=_Entity,
        const="name",
        metavar="NAME",
        help="the name of the entity type before it",
    )
    p.add_argument(
        "--entity-default",
        action=_Entity,
        const="default",
        nargs=0,
        help="the default entity of the entity type before it",
    )
    for flag, kind in _SHORTHANDS.items():
        if flag.endswith("-defaults"):
            p.add_argument(
                flag, action=_Entity, const=("default", kind), nargs=0, help=f"the default {kind[:-1]} entity"
            )
        else:
            p.add_argument(
                flag, action=_Entity, const=("name", kind), metavar="NAME", help=f"a {kind[:-1]} entity"
            )


def _entities(args: argparse.Namespace) -> list[tuple[str, str | None, bool]]:
    """(entity type, name, is given) in command-line order; default entity: name None."""
    out: list[tuple[str, str | None, bool]] = []
    pending: list[str] = []
    for what, value in getattr(args, "entities", None) or []:
        if isinstance(what, tuple):  # --user NAME, --client-defaults...
            kind = what[1]
            out.append((kind, None if what[0] == "default" else value, True))
        elif what == "type":
            pending.append(value)
        else:
            if not pending:
                raise ValueError("--entity-name / --entity-default must follow an --entity-type")
            out.append((pending.pop(0), None if what == "default" else value, True))
    out += [(kind, None, False) for kind in pending]  # a type without a name: every entity of it (describe)
    return out


def _quota_entity(entities: list[tuple[str, str | None, bool]]) -> dict[str, str | None]:
    kinds = [k for k, _n, _g in entities]
    if len(set(kinds)) != len(kinds) or any(k not in _QUOTA_TYPES for k in kinds):
        raise ValueError(f"invalid entity types for client quotas: {', '.join(kinds)}")
    return {_QUOTA_TYPES[k]: name for k, name, _g in entities}


def _label(entity: ClientQuotaEntity) -> str:
    names = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
    return ", ".join(f"the default {names[k]}" if v is None else f"{names[k]} '{v}'" for k, v in entity.parts)


def _quota_float(key: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"the value of {key} must be a number, got {value!r}") from None


def cmd_quotas_describe(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """``odradek configs`` describing client quotas of users / client ids / IPs (DescribeClientQuotas), for
    ``run_admin``: writes to ``out`` and returns the exit status; a Kafka error or ValueError raised
    becomes the one-line error and exit status 1."""
    entities = _entities(args)
    _quota_entity(entities)
    components: dict[str, Any] = {
        _QUOTA_TYPES[k]: (name if given else SPECIFIED) for k, name, given in entities
    }
    found = admin.describe_client_quotas(components, strict=True, timeout=args.timeout)
    if getattr(args, "output", "table") == "json":
        write_json(
            [
                {"entity": {k: v for k, v in entity.parts}, "quotas": dict(sorted(quotas.items()))}
                for entity, quotas in sorted(found.items(), key=lambda kv: str(kv[0]))
            ],
            out,
        )
        return 0
    for entity, quotas in sorted(found.items(), key=lambda kv: str(kv[0])):
        values = ", ".join(f"{k}={v}" for k, v in sorted(quotas.items()))
        out.write(f"Quota configs for {_label(entity)} are {values}\n")
    if not found and all(given for _k, _n, given in entities):
        out.write(f"Quota configs for {_label(ClientQuotaEntity.of(_quota_entity(entities)))} are \n")
    return 0


def cmd_quotas_alter(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """``odradek configs`` setting or deleting client quotas of a user / client id / IP (AlterClientQuotas),
    for ``run_admin``: writes to ``out`` and returns the exit status; a Kafka error or ValueError raised
    becomes the one-line error and exit status 1."""
    entities = _entities(args)
    if not all(given for _k, _n, given in entities):
        raise ValueError(
            "an entity name (--entity-name) or --entity-default is needed for every --entity-type with --alter"
        )
    entity = _quota_entity(entities)
    ops: dict[str, float | None] = {}
    for text in (
        list(args.top_add_config)
        + list(getattr(args, "add_config", []))
        + [f"{k}={v}" for k, v in parse_pairs(getattr(args, "set", []), "--set").items()]
    ):
        ops.update({k: _quota_float(k, v) for k, v in split_kafka_configs(text).items()})
    deletes = (
        list(args.top_delete_config)
        + list(getattr(args, "delete_config", []))
        + list(getattr(args, "delete", []))
    )
    for text in deletes:
        ops.update({k.strip(): None for k in text.split(",") if k.strip()})
    if not ops:
        raise ValueError("nothing to alter: give --add-config or --delete-config")
    validate_only = bool(getattr(args, "validate_only", False))
    admin.alter_client_quotas([(entity, ops)], validate_only=validate_only, timeout=args.timeout)
    label = _label(ClientQuotaEntity.of(entity))
    out.write(f"{'Validated' if validate_only else 'Completed'} updating config for {label}.\n")
    return 0


def _is_quota(args: argparse.Namespace) -> bool:
    entities = _entities(args)
    return bool(entities) and all(k in _QUOTA_TYPES for k, _n, _g in entities)


def _kafka_style(args: argparse.Namespace) -> None:
    """``--entity-type topics|brokers --entity-name X --alter|--describe``: the subcommands' options."""
    entities = _entities(args)
    if len(entities) != 1:
        raise ValueError(
            "give one --entity-type topics|brokers|client-metrics|groups with its --entity-name or --entity-default"
        )
    kind, name, given = entities[0]
    args.client_metrics = name if kind == "client-metrics" else None
    if kind == "client-metrics" and name is None:
        raise ValueError("--entity-type client-metrics needs an --entity-name")
    args.group = name if kind == "groups" else None
    if kind == "groups" and name is None:
        raise ValueError("--entity-type groups needs an --entity-name")
    args.topic = name if kind == "topics" else None
    args.broker = name if kind == "brokers" and name is not None else None
    args.broker_defaults = kind == "brokers" and name is None and given
    if kind == "topics" and name is None:
        raise ValueError("--entity-type topics needs an --entity-name")
    args.all = False
    args.set, args.delete, args.append, args.subtract = [], [], [], []
    args.add_config, args.delete_config = list(args.top_add_config), list(args.top_delete_config)
    args.validate_only = False


def _resource(args: argparse.Namespace) -> tuple[ConfigResource, str, str]:
    """The resource, its kind (for _DYNAMIC) and how to name it in output."""
    if args.topic is not None:
        return ConfigResource("topic", args.topic), "topic", f"topic {args.topic}"
    if getattr(args, "client_metrics", None) is not None:
        name = args.client_metrics
        return ConfigResource("client_metrics", name), "client-metrics", f"client-metric {name}"
    if getattr(args, "group", None) is not None:
        return ConfigResource("group", args.group), "group", f"group {args.group}"
    if args.broker is not None:
        if not args.broker.isdigit():
            raise ValueError(f"--broker expects a broker id, got {args.broker!r}")
        return ConfigResource("broker", args.broker), "broker", f"broker {args.broker}"
    if not args.broker_defaults:
        raise ValueError(
            "give --topic, --broker, --broker-defaults, --client-metrics, --group or a client quota entity "
            "(--user, --client...)"
        )
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
    return (
        "{"
        + ", ".join(f"{s.source.name}:{s.name}={s.value if s.value is not None else ''}" for s in e.synonyms)
        + "}"
    )


def _configs_json(resource: ConfigResource, shown: list[ConfigEntry], kind: str) -> dict[str, Any]:
    return {
        "resource": {"type": resource.type.name.lower(), "name": resource.name},
        "configs": [
            {
                "name": e.name,
                "value": None if e.is_sensitive else e.value,
                "source": e.source.name,
                "sensitive": e.is_sensitive,
                "read_only": e.read_only,
                "used": _used(kind, e.name),
                "synonyms": [
                    {"name": syn.name, "value": syn.value, "source": syn.source.name} for syn in e.synonyms
                ],
            }
            for e in sorted(shown, key=lambda e: e.name)
        ],
    }


def _used(kind: str, name: str) -> bool:
    """Whether Odradek acts on this config (Kafka's others are accepted, stored and described)."""
    if kind == "topic":
        key = TOPIC_KEYS.get(name)
        return key is None or key.used
    if kind in ("client-metrics", "group"):
        return True
    d = BROKER_CONFIGS.get(name)
    return d is None or d.used


def cmd_describe(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """``odradek configs describe``: a topic's or broker's dynamic configs (every one with ``--all``), for
    ``run_admin``: writes to ``out`` and returns the exit status; a Kafka error or ValueError raised
    becomes the one-line error and exit status 1."""
    resource, kind, label = _resource(args)
    entries = admin.describe_configs([resource], timeout=args.timeout)[resource]
    shown = list(entries.values()) if args.all else [e for e in entries.values() if e.source in _DYNAMIC[kind]]
    if getattr(args, "output", "table") == "json":
        write_json(_configs_json(resource, shown, kind), out)
        return 0
    if args.all:
        out.write(f"All configs for {label} are:\n")
    else:
        heading = "Default configs" if kind == "broker-defaults" else "Dynamic configs"
        out.write(f"{heading} for {label} are:\n")
    for e in sorted(shown, key=lambda e: e.name):
        value = "" if e.value is None else ("<sensitive>" if e.is_sensitive else e.value)
        extra = f" source={e.source.name}" if args.all else ""
        unused = " (accepted, not used by Odradek)" if not _used(kind, e.name) else ""
        out.write(
            f"  {e.name}={value} sensitive={str(e.is_sensitive).lower()}{extra} synonyms={_synonyms(e)}{unused}\n"
        )
    return 0


def cmd_alter(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """``odradek configs alter``: set, append to, subtract from or delete a topic's or broker's configs
    (IncrementalAlterConfigs), for ``run_admin``: writes to ``out`` and returns the exit status; a Kafka
    error or ValueError raised becomes the one-line error and exit status 1."""
    resource, _kind, label = _resource(args)
    ops = [AlterConfigOp.set(k, v) for k, v in parse_pairs(args.set, "--set").items()]
    for text in args.add_config:
        ops += [AlterConfigOp.set(k, v) for k, v in split_kafka_configs(text).items()]
    ops += [AlterConfigOp.delete(k) for k in args.delete]
    ops += [
        AlterConfigOp.delete(k.strip()) for text in args.delete_config for k in text.split(",") if k.strip()
    ]
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
    """Run ``odradek configs`` for the parsed ``args``; returns the exit status: 0, 1 with the error on
    stderr, 2 for a usage error."""
    command = args.configs_command
    if command is None:  # kafka-configs style: --describe / --alter
        if args.describe == args.alter:
            print(
                "odradek configs: give a COMMAND (describe, alter), or --describe or --alter", file=sys.stderr
            )
            return 2
        command = "describe" if args.describe else "alter"
        try:
            quota = _is_quota(args)
            if not quota:
                _kafka_style(args)
        except ValueError as exc:
            print(f"odradek configs: {exc}", file=sys.stderr)
            return 2
    else:
        args.top_add_config, args.top_delete_config = [], []
        try:
            quota = _is_quota(args)
        except ValueError as exc:
            print(f"odradek configs: {exc}", file=sys.stderr)
            return 2
    if quota:
        commands = {"describe": cmd_quotas_describe, "alter": cmd_quotas_alter}
    else:
        commands = {"describe": cmd_describe, "alter": cmd_alter}
    return run_admin("configs", commands[command], args)
