"""``odradek features``: the cluster's feature flags, like ``kafka-features.sh``.

::

    odradek features describe
    odradek features upgrade --feature transaction.version=2 [--dry-run]
    odradek features upgrade --metadata 4.0-IV3          # or --release-version 4.0
    odradek features downgrade --feature transaction.version=1 [--unsafe] [--dry-run]
    odradek features disable --feature transaction.version

``describe`` prints one line per feature the broker supports, as kafka-features.sh does
(``Feature: ...\\tSupportedMinVersion: ...\\tSupportedMaxVersion: ...\\tFinalizedVersionLevel:
...\\tEpoch: ...``; metadata.version by name, 4.0-IV3).  Changes go through a broker
(UpdateFeatures): each refused one is reported with the broker's reason, exit code 1.
"""

from __future__ import annotations

import argparse
from typing import Any

from odradek.cli._common import add_output_option, write_json
from odradek.cli.topics import add_connection_options, run_admin
from odradek.client import Admin
from odradek.client.admin._features import SAFE_DOWNGRADE, UNSAFE_DOWNGRADE, UPGRADE
from odradek.cluster.features import METADATA_VERSION, TRANSACTION_VERSION, level_name, parse_level

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Add the ``odradek features`` subcommand (describe and change the cluster's feature flags, like kafka-
    features) and its options to the top-level subparsers ``sub``."""
    p = sub.add_parser(
        "features",
        help="describe and change the cluster's feature flags",
        description="Describe and change the cluster's finalized feature levels (like kafka-features.sh).",
    )
    add_connection_options(p, top=True)
    fsub = p.add_subparsers(dest="features_command", required=True, metavar="COMMAND")
    desc = fsub.add_parser("describe", help="supported and finalized levels", description="Describe the features.")
    add_output_option(desc)
    up = fsub.add_parser("upgrade", help="raise finalized levels", description="Upgrade finalized feature levels.")
    up.add_argument("--feature", action="append", default=[], metavar="NAME=LEVEL", help="(repeatable)")
    up.add_argument("--metadata", metavar="VERSION", help="the metadata.version to set (4.0-IV3, or its level)")
    up.add_argument("--release-version", metavar="VERSION",
                    help="the levels of a Kafka release (4.0): its metadata.version and the features it turns on")
    down = fsub.add_parser("downgrade", help="lower finalized levels", description="Downgrade finalized feature levels.")
    down.add_argument("--feature", action="append", default=[], metavar="NAME=LEVEL", help="(repeatable)")
    down.add_argument("--metadata", metavar="VERSION", help="the metadata.version to set")
    dis = fsub.add_parser("disable", help="set features to level 0", description="Disable features (level 0).")
    dis.add_argument("--feature", action="append", default=[], metavar="NAME", help="(repeatable)")
    for c in (up, down, dis):
        c.add_argument("--dry-run", action="store_true", help="validate only: change nothing")
    for c in (down, dis):
        c.add_argument("--unsafe", action="store_true", help="allow a downgrade that may lose metadata")
    for c in (desc, up, down, dis):
        add_connection_options(c, top=False)


def _describe(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    meta = admin.describe_features(timeout=args.timeout)
    rows = [
        (name, lo, hi, meta.finalized.get(name, 0)) for name, (lo, hi) in sorted(meta.supported.items())
    ]
    if getattr(args, "output", "table") == "json":
        write_json(
            [{"feature": n, "supported_min": lo, "supported_max": hi, "finalized": f, "epoch": meta.epoch}
             for n, lo, hi, f in rows],
            out,
        )
        return 0
    for name, lo, hi, finalized in rows:
        out.write(
            f"Feature: {name}\tSupportedMinVersion: {level_name(name, lo)}\t"
            f"SupportedMaxVersion: {level_name(name, hi)}\t"
            f"FinalizedVersionLevel: {level_name(name, finalized)}\tEpoch: {meta.epoch}\n"
        )
    return 0


def _release_levels(release: str) -> dict[str, int]:
    """The levels a Kafka release bootstraps: its last metadata.version, and transaction.version 2
    from 4.0-IV2 (KIP-890)."""
    mv = parse_level(METADATA_VERSION, release)
    levels = {METADATA_VERSION: mv}
    if mv >= 24:
        levels[TRANSACTION_VERSION] = 2
    return levels


def _updates(args: argparse.Namespace) -> dict[str, int]:
    command = args.features_command
    levels: dict[str, int] = {}
    for item in args.feature:
        if command == "disable":
            levels[item.strip()] = 0
            continue
        name, sep, level = item.partition("=")
        if not sep:
            raise ValueError(f"--feature {item!r}: expected NAME=LEVEL")
        levels[name.strip()] = parse_level(name.strip(), level)
    if getattr(args, "metadata", None):
        levels[METADATA_VERSION] = parse_level(METADATA_VERSION, args.metadata)
    if getattr(args, "release_version", None):
        for name, level in _release_levels(args.release_version).items():
            levels.setdefault(name, level)
    if not levels:
        raise ValueError("nothing to change: give --feature" + ("" if command == "disable" else " or --metadata"))
    return levels


def _change(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    command = args.features_command
    kind = UPGRADE if command == "upgrade" else UNSAFE_DOWNGRADE if args.unsafe else SAFE_DOWNGRADE
    levels = _updates(args)
    admin.update_features({n: (lv, kind) for n, lv in levels.items()}, validate_only=args.dry_run, timeout=args.timeout)
    for name, level in levels.items():
        shown = level_name(name, level)
        if command == "disable":
            out.write(f"{name} {'can be disabled' if args.dry_run else 'was disabled'}.\n")
        else:
            verb = "upgraded" if command == "upgrade" else "downgraded"
            out.write(f"{name} {'can be ' + verb if args.dry_run else 'was ' + verb} to {shown}.\n")
    return 0


def cmd_broker(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """``odradek features describe`` or a change of finalized levels through the admin API (ApiVersions,
    UpdateFeatures), for ``run_admin``: writes to ``out`` and returns the exit status; a Kafka error or
    ValueError raised becomes the one-line error and exit status 1."""
    if args.features_command == "describe":
        return _describe(admin, args, out)
    return _change(admin, args, out)


def run(args: argparse.Namespace) -> int:
    """Run ``odradek features`` for the parsed ``args``; returns the exit status: 0, or 1 with the error on
    stderr."""
    return run_admin("features", cmd_broker, args)
