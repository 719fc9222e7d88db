"""A broker that writes topics to Iceberg tables, and readers of those tables (PyIceberg, DuckDB)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from odradek.testing import BrokerProcess

pytest.importorskip("pyiceberg")
pytest.importorskip("pyarrow")

#: the broker's settings for these tests: a registry, quick group and transaction start-up
OVERRIDES = {
    "schema.registry.listeners": "http://127.0.0.1:0", "metrics.port": 0,
    "group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 1,
    "transaction.state.log.num.partitions": 1, "num.partitions": 1,
}
#: every table of these tests commits this often
FAST = {"odradek.iceberg.commit.interval.ms": "100"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("tables") / "data", overrides=OVERRIDES)
    b.start()
    try:
        yield b
    finally:
        b.stop()


def open_catalog(data_dir: Path) -> Any:
    """The broker's default catalog, opened as any PyIceberg user would (a SQL catalog keeps its
    tables under its name: the broker's is ``odradek``)."""
    from pyiceberg.catalog.sql import SqlCatalog

    home = data_dir / "iceberg"
    return SqlCatalog("odradek", uri=f"sqlite:///{home / 'catalog.db'}", warehouse=(home / "warehouse").as_uri())


def create_topic(bootstrap: str, name: str, partitions: int = 1, configs: Mapping[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1, config=dict(configs or {}))]).values():
        f.result(30)


def wait_until(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """Poll ``check`` until it returns something truthy (exceptions count as not yet)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            got = check()
        except Exception as exc:  # the table not created yet, the catalog's database busy
            got, last = None, exc
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})")


def table_arrow(data_dir: Path, table: str) -> Any:
    """The table's rows now (PyIceberg's scan)."""
    return open_catalog(data_dir).load_table(("odradek", table)).scan().to_arrow()


def wait_rows(data_dir: Path, table: str, count: int, timeout: float = 60.0) -> Any:
    """The table's rows once it holds at least ``count``."""
    def check() -> Any:
        t = table_arrow(data_dir, table)
        return t if t.num_rows >= count else None

    return wait_until(check, f"{count} rows in {table}", timeout)


def duckdb_rows(data_dir: Path, table: str, columns: str) -> list[tuple[Any, ...]]:
    """The table read by DuckDB's Iceberg extension (from its PyPI wheel: DuckDB cannot download
    extensions without network)."""
    duckdb = pytest.importorskip("duckdb")
    iceberg_ext = pytest.importorskip("duckdb_extension_iceberg")
    avro_ext = pytest.importorskip("duckdb_extension_avro")
    location = open_catalog(data_dir).load_table(("odradek", table)).metadata_location
    con = duckdb.connect()
    try:
        for ext, name in ((avro_ext, "avro"), (iceberg_ext, "iceberg")):
            path = next(Path(ext.__file__).parent.glob(f"extensions/*/{name}.duckdb_extension"))
            con.execute(f"LOAD '{path}'")
        return con.execute(f"SELECT {columns} FROM iceberg_scan('{location}') ORDER BY 1, 2").fetchall()
    finally:
        con.close()
