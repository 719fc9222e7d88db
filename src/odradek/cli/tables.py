"""``odradek tables``: the Iceberg tables of topics with ``odradek.iceberg.mode`` on.

``describe [TOPIC ...]`` reads the broker's catalog (the same settings as ``odradek serve``:
``--config``, ``--data-dir``, ``--override``, ``ODRADEK_*``) through PyIceberg and prints, per
table, its rows, snapshots, partition spec, columns, the offset up to which it holds each Kafka
partition (the current snapshot's record) and the rows of its dead-letter table.  Read-only: it
creates nothing.  ``expire-snapshots TOPIC ...`` forgets the snapshots of the topics' tables (and
dead-letter tables) older than ``--older-than-ms``, through PyIceberg; the current snapshot, which
holds the offsets the writers resume from, is always kept.  ``compact TOPIC ...`` rewrites the
small data files of the topics' tables (and dead-letter tables), per Iceberg partition, into files
of about ``--target-file-size-bytes`` (:mod:`odradek.tables.compact`): the same rows, the same
record of offsets, safe while the broker's writers commit; it prints the files before and after.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from odradek.cli._common import EXIT_OK, add_output_option, fail, print_table, write_json

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Add ``odradek tables`` (describe the topics' Iceberg tables) to the top-level subparsers ``sub``."""
    p = sub.add_parser("tables", help="describe and maintain the Iceberg tables of topics written as tables "
                       "(odradek[tables])",
                       description=__doc__)
    tsub = p.add_subparsers(dest="tables_command", required=True)
    d = tsub.add_parser("describe", help="rows, snapshots, columns and offsets held of each topic's table")
    d.add_argument("topics", nargs="*", metavar="TOPIC", help="the topics (default: every table in the namespace)")
    _settings_options(d)
    add_output_option(d)
    e = tsub.add_parser("expire-snapshots", help="forget a topic's table's snapshots older than an age (and its "
                        "dead-letter table's); the current one is always kept")
    e.add_argument("topics", nargs="+", metavar="TOPIC")
    e.add_argument("--older-than-ms", type=int, default=5 * 24 * 3600 * 1000,
                   help="expire snapshots older than this (default 5 days, Iceberg's history.expire.max-snapshot-age-ms)")
    _settings_options(e)
    c = tsub.add_parser("compact", help="rewrite a topic's table's small data files, per Iceberg partition, into "
                        "fewer larger ones (and its dead-letter table's); safe while the broker writes")
    c.add_argument("topics", nargs="+", metavar="TOPIC")
    c.add_argument("--target-file-size-bytes", type=int, default=None,
                   help="the size of the files written (default: the table's write.target-file-size-bytes, else "
                        "512 MiB, Iceberg's default); files under 75%% of it are small")
    c.add_argument("--min-input-files", type=int, default=5,
                   help="compact an Iceberg partition only when it has at least this many small files (default 5, "
                        "as Iceberg's rewrite_data_files)")
    _settings_options(c)
    add_output_option(c)


def _settings_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", metavar="FILE", help="the broker's server.properties file")
    p.add_argument("--data-dir", metavar="DIR", default=None, help="the broker's data directory (log.dirs)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="a broker setting (odradek.iceberg.catalog.uri=..., odradek.iceberg.warehouse=...)")


def describe_table(table: Any, dead: Any | None) -> dict[str, Any]:
    """One table as ``odradek tables describe --output json`` prints it."""
    from odradek.tables.writer import RANGE, recorded_offsets

    snap = table.current_snapshot()
    summary = snap.summary.additional_properties if snap is not None and snap.summary is not None else {}
    return {
        "table": ".".join(table.name()),
        "location": table.location(),
        "rows": _rows(table),
        "data_files": int(summary.get("total-data-files", 0)),
        "snapshots": len(table.metadata.snapshots),
        "partition_spec": [f"{f.transform}({table.schema().find_column_name(f.source_id)})" for f in table.spec().fields],
        "columns": [{"name": f.name, "type": str(f.field_type)} for f in table.schema().fields],
        "offsets": {str(p): o for p, o in sorted(recorded_offsets(table).items())},
        "last_commit": {k[len(RANGE):]: v for k, v in summary.items() if k.startswith(RANGE)},
        "dead_letters": _rows(dead),
    }


def _rows(table: Any | None) -> int:
    snap = table.current_snapshot() if table is not None else None
    if snap is None or snap.summary is None:
        return 0
    return int(snap.summary.additional_properties.get("total-records", 0))


def _expire(catalog: Any, namespace: str, topics: list[str], older_than_ms: int) -> int:
    from datetime import UTC, datetime, timedelta

    from pyiceberg.exceptions import NoSuchTableError

    from odradek.tables.catalog import DEAD_LETTER_SUFFIX

    cutoff = datetime.now(UTC) - timedelta(milliseconds=older_than_ms)
    for topic in topics:
        for name in (topic, topic + DEAD_LETTER_SUFFIX):
            try:
                table = catalog.load_table((namespace, name))
            except NoSuchTableError:
                if name == topic:
                    raise
                continue
            before = len(table.metadata.snapshots)
            table.maintenance.expire_snapshots().older_than(cutoff).commit()
            table.refresh()
            print(f"{namespace}.{name}: {before - len(table.metadata.snapshots)} snapshots expired, "
                  f"{len(table.metadata.snapshots)} kept")
    return EXIT_OK


def _compact(catalog: Any, namespace: str, args: argparse.Namespace) -> int:
    from pyiceberg.exceptions import NoSuchTableError

    from odradek.tables.catalog import DEAD_LETTER_SUFFIX
    from odradek.tables.compact import compact

    if args.min_input_files < 2:
        return fail("tables", "--min-input-files must be at least 2")
    if args.target_file_size_bytes is not None and args.target_file_size_bytes <= 0:
        return fail("tables", "--target-file-size-bytes must be positive")
    done = []
    for topic in args.topics:
        for name in (topic, topic + DEAD_LETTER_SUFFIX):
            try:
                table = catalog.load_table((namespace, name))
            except NoSuchTableError:
                if name == topic:
                    raise
                continue
            r = compact(table, target_file_size=args.target_file_size_bytes, min_input_files=args.min_input_files)
            done.append(r.as_dict())
            if args.output == "json":
                continue
            held = " ".join(f"{p}:{o}" for p, o in sorted(r.offsets.items())) or "-"
            if not r.files_rewritten:
                print(f"{r.table}: {r.files_before} data files, nothing to compact (no Iceberg partition has "
                      f"{args.min_input_files} small files); {r.rows} rows; offsets held {held}")
                continue
            print(f"{r.table}: {r.files_before} data files -> {r.files_after}: {r.files_rewritten} small files in "
                  f"{r.partitions} Iceberg partitions rewritten into {r.files_written} ({r.rows_rewritten} of "
                  f"{r.rows} rows); snapshot {r.snapshot_id}; offsets held unchanged: {held}"
                  + (f"; {r.races} races with the writers" if r.races else ""))
    if args.output == "json":
        write_json(done, sys.stdout)
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    """Run ``odradek tables describe|expire-snapshots|compact``; returns the exit status (1: the catalog or
    a table could not be read, said on stderr)."""
    from odradek.config import BrokerConfig, ConfigError
    from odradek.settings import settings_from

    flags = {"log.dirs": args.data_dir} if args.data_dir is not None else {}
    try:
        settings = settings_from(BrokerConfig.load(args.config, args.override, flags))
    except (ConfigError, OSError) as exc:
        return fail("tables", str(exc))
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    from odradek.tables.catalog import DEAD_LETTER_SUFFIX, open_catalog

    try:
        catalog = open_catalog(settings.tables, settings.log.directories[0], create=False)
        namespace = settings.tables.namespace
        if args.tables_command == "expire-snapshots":
            return _expire(catalog, namespace, args.topics, args.older_than_ms)
        if args.tables_command == "compact":
            return _compact(catalog, namespace, args)
        if args.topics:
            names = list(args.topics)
        else:
            names = sorted(n[-1] for n in catalog.list_tables(namespace) if not n[-1].endswith(DEAD_LETTER_SUFFIX))
        out = []
        for name in names:
            table = catalog.load_table((namespace, name))
            try:
                dead = catalog.load_table((namespace, name + DEAD_LETTER_SUFFIX))
            except NoSuchTableError:
                dead = None
            out.append(describe_table(table, dead))
    except (NoSuchTableError, NoSuchNamespaceError) as exc:
        return fail("tables", f"{exc} (is the topic's odradek.iceberg.mode on, and are these the broker's settings?)")
    except Exception as exc:  # the catalog's database or server unreachable
        return fail("tables", f"{type(exc).__name__}: {exc}")
    if args.output == "json":
        write_json(out, sys.stdout)
        return EXIT_OK
    if not out:
        print("no tables", file=sys.stdout)
        return EXIT_OK
    rows = [["TABLE", "ROWS", "SNAPSHOTS", "DEAD LETTERS", "PARTITIONED BY", "OFFSETS HELD"]]
    for t in out:
        rows.append([t["table"], str(t["rows"]), str(t["snapshots"]), str(t["dead_letters"]),
                     ",".join(t["partition_spec"]) or "-",
                     " ".join(f"{p}:{o}" for p, o in t["offsets"].items()) or "-"])
    print_table(rows, sys.stdout)
    return EXIT_OK
