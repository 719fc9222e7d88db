"""The clients' and the Spark source's option tables are rows of the broker's kind (ConfigDef:
name, type, default, documentation, valid values), and what the clients start from is derived
from them."""

from __future__ import annotations

import pytest

from odradek.client import (
    ADMIN_CONFIGS,
    ADMIN_DEFAULTS,
    CONSUMER_CONFIGS,
    CONSUMER_DEFAULTS,
    PRODUCER_CONFIGS,
    PRODUCER_DEFAULTS,
)
from odradek.config import BROKER_CONFIGS, TYPE_CODES, ConfigDef
from odradek.spark._options import (
    SINK_OPTION_ROWS,
    SINK_OPTIONS,
    SOURCE_OPTION_ROWS,
    SOURCE_OPTIONS,
    SPARK_OPTION_ROWS,
    parse_sink_options,
    parse_source_options,
)

TABLES = {
    "producer": PRODUCER_CONFIGS, "consumer": CONSUMER_CONFIGS, "admin": ADMIN_CONFIGS,
    "spark source": SOURCE_OPTION_ROWS, "spark sink": SINK_OPTION_ROWS, "spark": SPARK_OPTION_ROWS,
}


@pytest.mark.parametrize("table", TABLES)
def test_every_option_table_is_rows_of_the_brokers_kind(table: str) -> None:
    rows = TABLES[table]
    assert rows and all(type(r) is ConfigDef for r in rows)
    names = [r.name for r in rows]
    assert len(names) == len(set(names)), table
    for r in rows:
        assert r.type in TYPE_CODES, (table, r.name)
        assert r.doc.strip(), (table, r.name)
        if r.valid and r.default is not None:
            assert str(r.default) in r.valid, (table, r.name)
    assert all(type(d) is ConfigDef for d in BROKER_CONFIGS.values())


def test_the_clients_defaults_are_the_rows() -> None:
    for rows, defaults in ((PRODUCER_CONFIGS, PRODUCER_DEFAULTS), (CONSUMER_CONFIGS, CONSUMER_DEFAULTS),
                           (ADMIN_CONFIGS, ADMIN_DEFAULTS)):
        assert defaults == {r.name: r.default for r in rows}
    assert tuple(r.name for r in SOURCE_OPTION_ROWS) == SOURCE_OPTIONS
    assert tuple(r.name for r in SINK_OPTION_ROWS) == SINK_OPTIONS


def test_kafka_options_of_spark_are_parsed_by_their_rows_type() -> None:
    source = parse_source_options(
        {"kafka.bootstrap.servers": "b:9092", "subscribe": "t", "kafka.check.crcs": "false",
         "kafka.max.partition.fetch.bytes": "2048"},
        streaming=False,
    )
    assert source.consumer_config["check.crcs"] is False
    assert source.consumer_config["max.partition.fetch.bytes"] == 2048
    sink = parse_sink_options({"kafka.bootstrap.servers": "b:9092", "kafka.linger.ms": "7",
                               "kafka.compression.level": "5"})
    assert sink.producer_config["linger.ms"] == 7
    assert sink.producer_config["compression.level"] == 5  # an integer (its default is none)
