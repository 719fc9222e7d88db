"""key_value mode: every committed record of the topic in its Iceberg table, read by PyIceberg and DuckDB."""

from __future__ import annotations

from typing import Any

import confluent_kafka as ck
import pytest

from odradek.testing import BrokerProcess
from tests.tables.conftest import FAST, create_topic, duckdb_rows, open_catalog, table_arrow, wait_rows


def _produce(bootstrap: str, topic: str, records: list[tuple[int, bytes | None, bytes, list[tuple[str, bytes]]]]
             ) -> dict[tuple[int, int], tuple[bytes | None, bytes, list[tuple[str, bytes]]]]:
    """Produce and return what each record became: (partition, offset) -> (key, value, headers)."""
    placed: dict[tuple[int, int], Any] = {}
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})

    def report(headers: list[tuple[str, bytes]]) -> Any:
        def done(err: Any, msg: Any) -> None:
            assert err is None, err
            placed[(msg.partition(), msg.offset())] = (msg.key(), msg.value(), headers)

        return done

    for partition, key, value, headers in records:
        p.produce(topic, value, key, partition=partition, headers=headers or None, on_delivery=report(headers))
    assert p.flush(30) == 0
    return placed


def test_key_value_table_holds_every_record_once_with_its_columns(broker: BrokerProcess) -> None:
    topic = "kv-orders"
    create_topic(broker.bootstrap, topic, 2, {"odradek.iceberg.mode": "key_value", **FAST})
    records = [(i % 2, None if i % 5 == 0 else f"k{i}".encode(), f"v{i}".encode() * (i % 7),
                [("h", f"{i}".encode())] if i % 3 == 0 else []) for i in range(300)]
    placed = _produce(broker.bootstrap, topic, records)
    table = wait_rows(broker.data_dir, topic, len(placed))
    rows = table.to_pylist()
    assert len(rows) == len(placed)  # nothing twice
    got = {(r["partition"], r["offset"]): (r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"]])
           for r in rows}
    assert got == placed
    assert {r["topic"] for r in rows} == {topic}
    assert all(r["timestamp"] is not None for r in rows)
    # the table's own record of what it holds: the current snapshot's summary, per partition
    t = open_catalog(broker.data_dir).load_table(("odradek", topic))
    summary = t.current_snapshot().summary.additional_properties
    ends = {p: 1 + max(o for q, o in placed if q == p) for p in (0, 1)}
    assert {p: int(summary[f"odradek.next-offset.{p}"]) for p in (0, 1)} == ends
    # partitioned by the hour of the record timestamp (the default spec)
    assert [f.transform.__class__.__name__ for f in t.spec().fields] == ["HourTransform"]
    # DuckDB reads the same table
    duck = duckdb_rows(broker.data_dir, topic, "partition, \"offset\", key, value")
    assert duck == sorted((p, o, k, v) for (p, o), (k, v, _h) in placed.items())


def _lag(metrics_url: str, topic: str) -> dict[str, tuple[float, float]]:
    """partition -> (records, seconds) behind, from the broker's /metrics."""
    import re
    import urllib.request

    with urllib.request.urlopen(metrics_url, timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, list[float]] = {}
    for kind, part, value in re.findall(
        rf'odradek_iceberg_writer_lag_(records|seconds)\{{partition="(\d+)",topic="{topic}"\}} ([0-9.e+-]+)', text
    ):
        out.setdefault(part, [0.0, 0.0])[kind == "seconds"] = float(value)
    return {k: (v[0], v[1]) for k, v in out.items()}


def test_writer_lag_is_a_metric_and_returns_to_zero_after_a_burst(broker: BrokerProcess) -> None:
    from tests.tables.conftest import wait_until

    topic = "kv-lag"
    assert broker.metrics_url is not None
    create_topic(broker.bootstrap, topic, 2, {"odradek.iceberg.mode": "key_value", **FAST})
    placed = _produce(broker.bootstrap, topic, [(i % 2, None, b"x" * 100, []) for i in range(2000)])
    wait_rows(broker.data_dir, topic, len(placed))
    lag = wait_until(lambda: (lambda m: m if set(m) == {"0", "1"} and all(v == (0, 0) for v in m.values()) else None)(
        _lag(broker.metrics_url, topic)), "the writers' lag back to 0")
    assert lag == {"0": (0, 0), "1": (0, 0)}
    # the console's Tables page shows the same lag, per partition and writing broker
    from tests.console.conftest import Console
    from tests.console.test_pages import _cells

    console = Console(broker.bootstrap, "--metrics-url", broker.metrics_url).start()
    try:
        rows = wait_until(lambda: [r for r in _cells(console.page("/tables"), "tables") if r[0] == topic] or None,
                          "the console's table lag rows")
        assert sorted(rows) == [[topic, "0", "0", "0", "0.0"], [topic, "1", "0", "0", "0.0"]]
    finally:
        console.stop()


@pytest.mark.parametrize("configs", [
    {"odradek.iceberg.mode": "parquet"},
    {"odradek.iceberg.partition.spec": "minute(timestamp)"},
    {"odradek.iceberg.partition.spec": "hour(timestamp),day(timestamp)"},
    {"odradek.iceberg.commit.interval.ms": "0"},
])
def test_invalid_table_configs_are_refused_with_invalid_config(broker: BrokerProcess, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    [future] = admin.create_topics([NewTopic("bad-table-config", 1, 1, config=configs)]).values()
    with pytest.raises(ck.KafkaException) as info:
        future.result(30)
    assert info.value.args[0].code() == ck.KafkaError.INVALID_CONFIG
    [(_name, value)] = configs.items()
    assert value in info.value.args[0].str()  # the value is refused, not the name


def test_valid_table_configs_are_accepted_and_described(broker: BrokerProcess) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource

    configs = {"odradek.iceberg.mode": "value_schema", "odradek.iceberg.partition.spec": "day(timestamp),identity(partition)",
               "odradek.iceberg.commit.interval.ms": "5000"}
    create_topic(broker.bootstrap, "good-table-config", 1, configs)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    [future] = admin.describe_configs([ConfigResource("topic", "good-table-config")]).values()
    described = {k: v.value for k, v in future.result(30).items() if k.startswith("odradek.iceberg.")}
    assert described == configs


def test_odradek_tables_describe(broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from odradek.cli.__main__ import main

    topic = "kv-described"
    create_topic(broker.bootstrap, topic, 2, {"odradek.iceberg.mode": "key_value", **FAST})
    placed = _produce(broker.bootstrap, topic, [(i % 2, None, b"v", []) for i in range(30)])
    wait_rows(broker.data_dir, topic, len(placed))
    capsys.readouterr()
    assert main(["tables", "describe", topic, "--data-dir", str(broker.data_dir), "--output", "json"]) == 0
    [described] = json.loads(capsys.readouterr().out)
    assert described["table"] == f"odradek.{topic}"
    assert described["rows"] == 30 and described["dead_letters"] == 0
    assert described["offsets"] == {"0": 15, "1": 15}
    assert described["partition_spec"] == ["hour(timestamp)"]
    assert [c["name"] for c in described["columns"]] == ["key", "value", "topic", "partition", "offset", "timestamp",
                                                        "headers"]
    assert main(["tables", "describe", "--data-dir", str(broker.data_dir)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("TABLE") and f"odradek.{topic}" in text and "0:15 1:15" in text
    assert main(["tables", "describe", "no-such-topic", "--data-dir", str(broker.data_dir)]) == 1


def test_a_topic_created_again_under_its_name_gets_a_new_table_and_the_old_one_is_kept(broker: BrokerProcess) -> None:
    from confluent_kafka.admin import AdminClient

    from tests.tables.conftest import wait_until

    topic = "kv-again"
    configs = {"odradek.iceberg.mode": "key_value", **FAST}
    create_topic(broker.bootstrap, topic, 1, configs)
    first = _produce(broker.bootstrap, topic, [(0, None, f"old{i}".encode(), []) for i in range(10)])
    wait_rows(broker.data_dir, topic, 10)
    catalog = open_catalog(broker.data_dir)
    old_id = catalog.load_table(("odradek", topic)).current_snapshot().summary.additional_properties[
        "odradek.topic-id"]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    [f] = admin.delete_topics([topic]).values()
    f.result(30)
    wait_until(lambda: create_topic(broker.bootstrap, topic, 1, configs) or True, "the topic created again")
    second = _produce(broker.bootstrap, topic, [(0, None, f"new{i}".encode(), []) for i in range(4)])
    assert sorted(o for _, o in second) == [0, 1, 2, 3]
    # the new topic's table holds its records from offset 0, and only those: offsets are a key again
    expected = sorted((o, v[1]) for (_, o), v in second.items())

    def rows() -> list[tuple[int, bytes]]:
        try:
            table = table_arrow(broker.data_dir, topic)
        except Exception:  # renamed, or not yet created again, at this moment
            return []
        return sorted(zip(table["offset"].to_pylist(), table["value"].to_pylist()))

    seen: list[tuple[int, bytes]] = []

    def settled() -> bool:
        # one read, kept: a read while the writer commits may fail and give [] for a moment
        seen[:] = rows()
        return len(seen) >= 4 and seen[:1] != [(0, b"old0")]

    wait_until(settled, "the new topic's rows in a table")
    assert seen == expected
    # the old topic's records are kept (retention independence), under the name with its id
    kept = catalog.load_table(("odradek", f"{topic}~{old_id[:8]}")).scan().to_arrow()
    assert sorted(zip(kept["offset"].to_pylist(), kept["value"].to_pylist())) == sorted(
        (o, v[1]) for (_, o), v in first.items())


def test_odradek_tables_expire_snapshots_keeps_the_current_one(broker: BrokerProcess,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from odradek.cli.__main__ import main

    topic = "kv-expired"
    create_topic(broker.bootstrap, topic, 1, {"odradek.iceberg.mode": "key_value", **FAST})
    for i in range(3):  # a snapshot each
        _produce(broker.bootstrap, topic, [(0, None, b"v", [])])
        wait_rows(broker.data_dir, topic, i + 1)
    table = open_catalog(broker.data_dir).load_table(("odradek", topic))
    assert len(table.metadata.snapshots) == 3
    capsys.readouterr()
    assert main(["tables", "expire-snapshots", topic, "--older-than-ms", "0", "--data-dir", str(broker.data_dir)]) == 0
    assert "2 snapshots expired, 1 kept" in capsys.readouterr().out
    table.refresh()
    assert len(table.metadata.snapshots) == 1
    assert table.scan().to_arrow().num_rows == 3
    # the writer goes on from the table's record in the snapshot kept
    _produce(broker.bootstrap, topic, [(0, None, b"v", [])])
    assert sorted(wait_rows(broker.data_dir, topic, 4)["offset"].to_pylist()) == [0, 1, 2, 3]


def test_turning_the_mode_on_later_writes_what_the_topic_already_holds(broker: BrokerProcess) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    topic = "kv-later"
    create_topic(broker.bootstrap, topic, 1)
    placed = _produce(broker.bootstrap, topic, [(0, None, f"v{i}".encode(), []) for i in range(20)])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    change = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("odradek.iceberg.mode", "key_value", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("odradek.iceberg.commit.interval.ms", "100", incremental_operation=AlterConfigOpType.SET),
    ])
    for f in admin.incremental_alter_configs([change]).values():
        f.result(30)
    table = wait_rows(broker.data_dir, topic, 20)
    assert sorted(table["offset"].to_pylist()) == sorted(o for _, o in placed)
