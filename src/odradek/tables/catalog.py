"""The Iceberg catalog the partition leaders commit to, and the topics' tables in it (PyIceberg).

A SQL catalog on SQLite under the first log dir by default (``<dir>/iceberg/catalog.db``, data in
``<dir>/iceberg/warehouse``); ``odradek.iceberg.catalog.uri`` names another database, or with
``odradek.iceberg.catalog.type=rest`` a REST catalog.  A topic's table is
``<namespace>.<topic>`` and its dead-letter table ``<namespace>.<topic>~dlq``.

Every call here blocks (files, the catalog's database or HTTP): run it off the event loop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from odradek.config import iceberg_partition_spec
from odradek.settings import TableSettings

__all__ = ["DEAD_LETTER_SUFFIX", "NO_RETRIES", "create_table", "dead_letter_identifier", "open_catalog", "table_identifier"]

#: the dead-letter table of topic T is T~dlq (a name no Kafka topic can have)
DEAD_LETTER_SUFFIX = "~dlq"
#: PyIceberg retries a commit that lost a race by re-applying it on the new parent, with the
#: snapshot summary it had: that would record offsets from before the winner's commit and append
#: rows the winner may hold.  The writers retry themselves (re-reading the table's record), so
#: their tables have PyIceberg's retries off.
NO_RETRIES = {"commit.retry.num-retries": "0"}


def open_catalog(settings: TableSettings, data_dir: Path, *, create: bool = True) -> Any:
    """The catalog (a ``pyiceberg.catalog.Catalog``); ``create``: its namespace (and the default
    SQLite file and warehouse directory) made if they are not there."""
    from pyiceberg.catalog import load_catalog

    home = data_dir / "iceberg"
    warehouse = settings.warehouse or (home / "warehouse").as_uri()
    if "://" not in warehouse:  # a path: PyIceberg takes URLs
        if create:
            Path(warehouse).mkdir(parents=True, exist_ok=True)
        warehouse = Path(warehouse).resolve().as_uri()
    props: dict[str, str] = {"warehouse": warehouse}
    if settings.catalog_type == "rest":
        if not settings.catalog_uri:
            raise ValueError("odradek.iceberg.catalog.type=rest needs odradek.iceberg.catalog.uri (the REST catalog's URL)")
        props.update(type="rest", uri=settings.catalog_uri)
    else:
        uri = settings.catalog_uri
        if uri is None:
            if create:
                (home / "warehouse").mkdir(parents=True, exist_ok=True)
            elif not (home / "catalog.db").exists():
                raise FileNotFoundError(f"no Iceberg catalog at {home / 'catalog.db'} (no topic has been written as a table)")
            uri = f"sqlite:///{home / 'catalog.db'}"
        props.update(type="sql", uri=uri)
    catalog = load_catalog("odradek", **props)
    if create:
        catalog.create_namespace_if_not_exists(settings.namespace)
    return catalog


def table_identifier(namespace: str, topic: str) -> tuple[str, str]:
    return (namespace, topic)


def dead_letter_identifier(namespace: str, topic: str) -> tuple[str, str]:
    return (namespace, topic + DEAD_LETTER_SUFFIX)


def set_aside(catalog: Any, identifier: tuple[str, str], aside: tuple[str, str]) -> bool:
    """Rename the table at ``identifier`` to ``aside``; False if another writer did it first (the
    table gone, or ``aside`` already there)."""
    from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError

    try:
        catalog.rename_table(identifier, aside)
    except (NoSuchTableError, TableAlreadyExistsError):
        return False
    return True


def create_table(catalog: Any, identifier: tuple[str, str], schema: pa.Schema, spec: str, columns: dict[str, str]) -> Any:
    """The table, created with this schema and ``odradek.iceberg.partition.spec`` if it is not
    there (another broker may create it at the same moment: then theirs).  ``columns`` maps the
    spec's sources (``timestamp``, ``partition``) to the table's column names."""
    from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import assign_fresh_schema_ids
    from pyiceberg.transforms import (
        DayTransform,
        HourTransform,
        IdentityTransform,
        MonthTransform,
        YearTransform,
    )

    try:
        return _without_retries(catalog.load_table(identifier))
    except NoSuchTableError:
        pass
    iceberg_schema = assign_fresh_schema_ids(catalog._convert_schema_if_needed(schema))
    transforms: dict[str, Any] = {
        "hour": HourTransform(), "day": DayTransform(), "month": MonthTransform(), "year": YearTransform(),
        "identity": IdentityTransform(),
    }
    fields = []
    for i, (transform, source) in enumerate(iceberg_partition_spec(spec)):
        column = columns[source]
        fields.append(PartitionField(
            source_id=iceberg_schema.find_field(column).field_id, field_id=1000 + i,
            transform=transforms[transform], name=f"{column}_{transform}",
        ))
    try:
        return catalog.create_table(identifier, schema=iceberg_schema, partition_spec=PartitionSpec(*fields),
                                    properties=NO_RETRIES)
    except TableAlreadyExistsError:
        return _without_retries(catalog.load_table(identifier))


def _without_retries(table: Any) -> Any:
    """The table with PyIceberg's commit retries off (set on a table created elsewhere)."""
    if all(table.properties.get(k) == v for k, v in NO_RETRIES.items()):
        return table
    with table.transaction() as tx:
        tx.set_properties(NO_RETRIES)
    return table
