"""The "table + tail" read (``source=table+tail``): a topic's Iceberg table for what it holds, its
log (read_committed) for the rest, every record once across the boundary.

Each read is compared, column by column, with the log read read_committed to the same end.  The
table's boundary is controlled by turning the topic's ``odradek.iceberg.mode`` off (the writers
stop: their lag series leave ``/metrics``) and on again, and observed with PyIceberg.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from odradek.client import Admin, ConfigResource, NewTopic
from odradek.spark._options import parse_source_options
from odradek.testing import BrokerProcess

pytest.importorskip("pyiceberg")
ck = pytest.importorskip("confluent_kafka")

OVERRIDES = {
    "metrics.port": 0, "group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 1,
    "transaction.state.log.num.partitions": 1, "num.partitions": 1,
}
#: the topics' tables commit this often
FAST = {"odradek.iceberg.mode": "key_value", "odradek.iceberg.commit.interval.ms": "100"}

Row = tuple[Any, ...]


@pytest.fixture(scope="module")
def tb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker whose topics may be written as tables (the default catalog, under its data dir)."""
    b = BrokerProcess(tmp_path_factory.mktemp("table-tail") / "data", overrides=OVERRIDES)
    b.start()
    try:
        yield b
    finally:
        b.stop()


# -- helpers -------------------------------------------------------------------------------------


def _admin(b: BrokerProcess) -> Admin:
    return Admin({"bootstrap.servers": b.bootstrap})


def _create(b: BrokerProcess, topic: str, partitions: int, configs: dict[str, str]) -> None:
    admin = _admin(b)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1, configs)])
    finally:
        admin.close()


def _set_mode(b: BrokerProcess, topic: str, mode: str) -> None:
    admin = _admin(b)
    try:
        admin.incremental_alter_configs({ConfigResource("topic", topic): {"odradek.iceberg.mode": mode}})
    finally:
        admin.close()


def _stable_ends(b: BrokerProcess, topic: str, partitions: int) -> dict[int, int]:
    """The partitions' last stable offsets (what read_committed reads up to)."""
    admin = _admin(b)
    try:
        got = admin.list_offsets({(topic, p): "latest" for p in range(partitions)}, isolation_level="read_committed")
    finally:
        admin.close()
    return {tp[1]: int(info.offset) for tp, info in got.items()}


def _wait(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            got = check()
        except Exception as exc:  # the table not created yet
            got, last = None, exc
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})")


def _table_offsets(b: BrokerProcess, topic: str) -> dict[int, int]:
    """The table's current record of what it holds (PyIceberg, as any reader of the table)."""
    from pyiceberg.catalog.sql import SqlCatalog

    home = Path(b.data_dir) / "iceberg"
    catalog = SqlCatalog("odradek", uri=f"sqlite:///{home / 'catalog.db'}", warehouse=(home / "warehouse").as_uri())
    snap = catalog.load_table(("odradek", topic)).current_snapshot()
    if snap is None or snap.summary is None:
        return {}
    prefix = "odradek.next-offset."
    return {int(k[len(prefix):]): int(v) for k, v in snap.summary.additional_properties.items() if k.startswith(prefix)}


def _writers_gone(b: BrokerProcess, topic: str) -> bool:
    """No writer of the topic's partitions is left (their lag series are gone from /metrics)."""
    assert b.metrics_url is not None
    with urllib.request.urlopen(b.metrics_url, timeout=10) as resp:
        text = resp.read().decode()
    return re.search(rf'odradek_iceberg_writer_lag_records\{{[^}}]*topic="{re.escape(topic)}"', text) is None


def _freeze_table(b: BrokerProcess, topic: str) -> dict[int, int]:
    """Turn the topic's table writing off and wait for its writers to stop: the table's offsets then."""
    _set_mode(b, topic, "off")
    _wait(lambda: _writers_gone(b, topic), f"the writers of {topic} stopped")
    return _table_offsets(b, topic)


class _Producer:
    """A producer of ``(partition, value)`` records, each with a key and a header; with ``txn``,
    transactional.  It tells the (partition, offset) of what it committed and aborted."""

    def __init__(self, b: BrokerProcess, topic: str, txn: str | None = None) -> None:
        conf: dict[str, Any] = {"bootstrap.servers": b.bootstrap, "linger.ms": 2}
        if txn:
            conf["transactional.id"] = txn
        self.topic, self.txn = topic, txn
        self.producer = ck.Producer(conf)
        if txn:
            self.producer.init_transactions(30)
        self.committed: set[tuple[int, int]] = set()
        self.aborted: set[tuple[int, int]] = set()

    def send(self, records: list[tuple[int, bytes]], abort: bool = False) -> None:
        """The records, flushed (with ``txn``: in one transaction, committed or aborted)."""
        placed: set[tuple[int, int]] = set()

        def done(err: Any, msg: Any) -> None:
            assert err is None, err
            placed.add((msg.partition(), msg.offset()))

        p = self.producer
        if self.txn:
            p.begin_transaction()
        for part, value in records:
            p.produce(self.topic, value, key=value[-4:], partition=part, headers=[("h", value[:3])], on_delivery=done)
        p.flush(30)
        if abort:
            p.abort_transaction(30)
            self.aborted |= placed
            return
        if self.txn:
            p.commit_transaction(30)
        self.committed |= placed


def _produce(b: BrokerProcess, topic: str, records: list[tuple[int, bytes]], txn: str | None = None,
             abort_every: int = 0) -> set[tuple[int, int]]:
    """Produce the records (with ``txn``: in transactions of 20, every ``abort_every``-th aborted);
    the (partition, offset) of the aborted ones."""
    producer = _Producer(b, topic, txn)
    if not txn:
        producer.send(records)
        return set()
    for n, i in enumerate(range(0, len(records), 20)):
        producer.send(records[i:i + 20], abort=bool(abort_every) and n % abort_every == abort_every - 1)
    return producer.aborted


def _load(spark: Any, b: BrokerProcess, topic: str, **options: str) -> Any:
    reader = (spark.read.format("odradek").option("kafka.bootstrap.servers", b.bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("includeHeaders", "true"))
    for k, v in options.items():
        reader = reader.option(k.replace("_", "."), v)
    return reader.load()


def _rows(df: Any) -> Any:
    """Every column of every row (an Arrow table: millions of rows compare quickly), in
    (partition, offset) order."""
    return df.toArrow().sort_by([("partition", "ascending"), ("offset", "ascending")])


def _table_tail(spark: Any, b: BrokerProcess, topic: str, **options: str) -> Any:
    return _rows(_load(spark, b, topic, source="table+tail", **options))


def _log(spark: Any, b: BrokerProcess, topic: str, ends: dict[int, int]) -> Any:
    """The log read read_committed up to ``ends``."""
    ending = json.dumps({topic: {str(p): e for p, e in ends.items()}})
    return _rows(_load(spark, b, topic, endingOffsets=ending, **{"kafka.isolation.level": "read_committed"}))


def _where(rows: Any, predicate: Callable[[int, int], bool]) -> Any:
    """The rows whose (partition, offset) satisfy ``predicate``."""
    keep = [predicate(p, o) for p, o in zip(rows["partition"].to_pylist(), rows["offset"].to_pylist(), strict=True)]
    return rows.filter(pa.array(keep, pa.bool_()))


def _keys(rows: Any) -> list[tuple[int, int]]:
    return list(zip(rows["partition"].to_pylist(), rows["offset"].to_pylist(), strict=True))


def _once(rows: Any) -> None:
    keys = _keys(rows)
    twice = sorted({a for a, b in itertools.pairwise(keys) if a == b})
    assert not twice, f"records read twice: {twice[:10]}"


def _same(got: Any, expected: Any) -> None:
    assert got.num_rows == expected.num_rows, (got.num_rows, expected.num_rows)
    assert got.equals(expected), "the rows differ"


# -- tests ------------------------------------------------------------------------------------------


def test_every_record_once_while_producers_and_the_writer_run(spark: Any, tb: BrokerProcess) -> None:
    """A producer at full speed (30,000 more records from the start of each read) and a
    transactional one (every third transaction aborted) keep writing while the table's writers
    commit: each table+tail read holds every committed record of the log up to where it ends,
    column for column, once, and none aborted.  The second read runs with the writers stopped, so
    that its boundary is known: inside the range, with the producers still writing."""
    topic = "tt-live"
    _create(tb, topic, 3, {**FAST, "odradek.iceberg.commit.interval.ms": "300"})
    stop = threading.Event()
    allowance = [30_000]
    aborted: set[tuple[int, int]] = set()
    errors: list[BaseException] = []

    def full_speed() -> None:
        p = ck.Producer({"bootstrap.servers": tb.bootstrap, "linger.ms": 5})
        i = 0
        while not stop.is_set():
            if i >= allowance[0]:
                p.poll(0.01)  # this read's share is written: wait for the next read
                continue
            try:
                p.produce(topic, b"fast-%d" % i, key=b"%d" % (i % 97), partition=i % 3, headers=[("n", b"%d" % i)])
                i += 1
            except BufferError:
                p.poll(0.05)
            p.poll(0)
        p.flush(30)

    def transactional() -> None:
        producer = _Producer(tb, topic, "tt-live-tx")
        n = 0
        while not stop.is_set():
            producer.send([(random.randrange(3), b"tx-%d-%d" % (n, i)) for i in range(60)], abort=n % 3 == 2)
            aborted.update(producer.aborted)
            n += 1

    def guarded(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # reported by the test
                errors.append(exc)
        return run

    def check_read(frozen: dict[int, int] | None) -> None:
        allowance[0] += 30_000
        low = _stable_ends(tb, topic, 3)
        got = _table_tail(spark, tb, topic)
        log_rows = _log(spark, tb, topic, _stable_ends(tb, topic, 3))
        _once(got)
        keys = _keys(got)
        last = {p: max((o for q, o in keys if q == p), default=-1) for p in range(3)}
        # the read ends somewhere between the ends listed before and after it, and holds every
        # committed record of the log up to there, column for column: none missing, none twice
        _same(got, _where(log_rows, lambda p, o: o <= last[p]))
        log_keys = _keys(log_rows)
        for p in range(3):
            assert last[p] >= max((o for q, o in log_keys if q == p and o < low[p]), default=-1), p
            if frozen is not None:  # the table below the boundary, the log after it
                assert 0 < frozen[p] <= last[p], (p, frozen[p], last[p])
        assert not set(keys) & aborted

    threads = [threading.Thread(target=guarded(f), daemon=True) for f in (full_speed, transactional)]
    for t in threads:
        t.start()
    try:
        _wait(lambda: len(_table_offsets(tb, topic)) == 3 and all(_table_offsets(tb, topic).values()),
              "the table holds some of every partition")
        check_read(None)
        held = _freeze_table(tb, topic)
        check_read(held)
        _set_mode(tb, topic, "key_value")
        _wait(lambda: all(o > held[p] for p, o in _table_offsets(tb, topic).items()), "the table writes on")
        check_read(None)
        assert not errors, errors
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, errors


def test_boundary_is_exact_and_moves_with_the_tables_commits(spark: Any, tb: BrokerProcess) -> None:
    """The table holds partition 0 up to an offset, partition 1 never; the log has more of both
    (committed and aborted transactions): the read returns exactly the log's committed records,
    from the table below its offset and from the log after.  Once the table commits more, a new
    read has its boundary there, and is exact again."""
    topic = "tt-boundary"
    _create(tb, topic, 2, FAST)
    _produce(tb, topic, [(0, b"a-%03d" % i) for i in range(120)])
    _produce(tb, topic, [(0, b"t-%03d" % i) for i in range(60)], txn="tt-boundary-tx", abort_every=2)
    ends = _stable_ends(tb, topic, 2)
    _wait(lambda: _table_offsets(tb, topic).get(0) == ends[0], "the table holds partition 0")
    held = _freeze_table(tb, topic)
    assert held.get(0) == ends[0] and held.get(1, 0) == 0
    # the tail: more of partition 0 and all of partition 1 (with an aborted transaction in each)
    aborted = _produce(tb, topic, [(i % 2, b"b-%03d" % i) for i in range(80)], txn="tt-boundary-tx", abort_every=2)
    _produce(tb, topic, [(i % 2, b"c-%03d" % i) for i in range(40)])
    ends = _stable_ends(tb, topic, 2)
    assert ends[0] > held[0] + 10 and ends[1] > 10

    got = _table_tail(spark, tb, topic)
    expected = _log(spark, tb, topic, ends)
    _once(got)
    _same(got, expected)
    keys = _keys(got)
    assert any(p == 0 and o < held[0] for p, o in keys) and any(p == 0 and o >= held[0] for p, o in keys)
    assert aborted and not set(keys) & aborted
    # the catalog as options (the broker's default one, named)
    home = Path(tb.data_dir) / "iceberg"
    named = _table_tail(spark, tb, topic, **{"odradek.iceberg.catalog.uri": f"sqlite:///{home / 'catalog.db'}",
                                             "odradek.iceberg.warehouse": str(home / "warehouse"),
                                             "odradek.iceberg.namespace": "odradek"})
    _same(named, expected)
    # the table's files and the log's ranges in more Spark partitions: the same rows
    split = _load(spark, tb, topic, source="table+tail", minPartitions="6")
    assert split.rdd.getNumPartitions() >= 6
    _same(_rows(split), expected)
    # endingOffsets inside the table, and startingOffsets across the boundary
    inside = _table_tail(spark, tb, topic, endingOffsets=json.dumps({topic: {"0": held[0] - 5, "1": 3}}))
    _same(inside, _where(expected, lambda p, o: o < (held[0] - 5 if p == 0 else 3)))
    across = _table_tail(spark, tb, topic, startingOffsets=json.dumps({topic: {"0": held[0] - 5, "1": -2}}))
    _same(across, _where(expected, lambda p, o: p == 1 or o >= held[0] - 5))

    # the table writes on: a read after its commit has the boundary further on
    _set_mode(tb, topic, "key_value")
    _wait(lambda: _table_offsets(tb, topic) == ends, "the table holds the log")
    moved = _freeze_table(tb, topic)
    assert moved == ends and moved[0] > held[0]
    _produce(tb, topic, [(i % 2, b"d-%03d" % i) for i in range(30)])
    ends = _stable_ends(tb, topic, 2)
    got = _table_tail(spark, tb, topic)
    expected = _log(spark, tb, topic, ends)
    _once(got)
    _same(got, expected)
    assert {p for p, o in _keys(got) if o >= moved[p]} == {0, 1}


def test_records_retention_removed_are_read_from_the_table(spark: Any, tb: BrokerProcess) -> None:
    """The log's start moved into what the table holds: the table still returns the older records.
    Moved past it: the records in between are in neither, which is data loss (failOnDataLoss)."""
    topic = "tt-retention"
    _create(tb, topic, 1, FAST)
    _produce(tb, topic, [(0, b"a-%03d" % i) for i in range(100)])
    _wait(lambda: _table_offsets(tb, topic).get(0) == 100, "the table holds the log")
    held = _freeze_table(tb, topic)[0]
    _produce(tb, topic, [(0, b"b-%03d" % i) for i in range(50)])
    everything = _log(spark, tb, topic, {0: 150})
    assert [o for _, o in _keys(everything)] == list(range(150))

    admin = _admin(tb)
    try:
        admin.delete_records({(topic, 0): 60})  # as retention would: the log starts at 60
        _same(_log(spark, tb, topic, {0: 150}), everything.slice(60))
        _same(_table_tail(spark, tb, topic), everything)  # 0..59 from the table
        admin.delete_records({(topic, 0): held + 20})  # the log starts past what the table holds
    finally:
        admin.close()
    with pytest.raises(Exception, match=r"offsets 100 to 120 are in neither the Iceberg table"):
        _table_tail(spark, tb, topic)
    lossy = _table_tail(spark, tb, topic, failOnDataLoss="false")
    _same(lossy, pa.concat_tables([everything.slice(0, 100), everything.slice(120)]))


def test_the_guides_example(spark: Any, tb: BrokerProcess) -> None:
    """The example of docs/spark.md's "Table + tail" section, on a topic whose table holds part of
    it, and records the log no longer has."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "spark.md").read_text()
    section = text[text.index("## Table + tail"):]
    code = section[section.index("```python\n") + len("```python\n"):]
    code = code[:code.index("```")].replace("127.0.0.1:9092", tb.bootstrap)
    _create(tb, "orders", 2, FAST)
    _produce(tb, "orders", [(i % 2, b"order-%d" % i) for i in range(40)])
    _wait(lambda: _table_offsets(tb, "orders") == {0: 20, 1: 20}, "the table holds the orders")
    _freeze_table(tb, "orders")
    _produce(tb, "orders", [(i % 2, b"order-%d" % i) for i in range(40, 50)])
    expected = _log(spark, tb, "orders", {0: 25, 1: 25}).drop_columns(["headers"])
    admin = _admin(tb)
    try:
        admin.delete_records({("orders", 0): 10})  # retention: the table still has them
    finally:
        admin.close()
    scope: dict[str, Any] = {"spark": spark}
    exec(compile(code, "docs/spark.md", "exec"), scope)
    _same(_rows(scope["orders"]), expected)


def test_a_topic_without_a_table_is_a_clear_error(spark: Any, tb: BrokerProcess) -> None:
    topic = "tt-plain"
    _create(tb, topic, 1, {})
    _produce(tb, topic, [(0, b"x")])
    _create(tb, "tt-other", 1, FAST)  # the broker's catalog exists, with another topic's table
    _produce(tb, "tt-other", [(0, b"y")])
    _wait(lambda: _table_offsets(tb, "tt-other").get(0) == 1, "the other topic's table")
    with pytest.raises(Exception, match=r"topic 'tt-plain' has no Iceberg table .*odradek.iceberg.mode=key_value"):
        _table_tail(spark, tb, topic)
    # a catalog that cannot be opened
    with pytest.raises(Exception, match=r"cannot open the Iceberg catalog"):
        _table_tail(spark, tb, topic, **{"odradek.iceberg.warehouse": "/nonexistent/w",
                                         "odradek.iceberg.catalog.uri": "sqlite:////nonexistent/c.db"})


@pytest.mark.parametrize(("options", "message"), [
    ({"source": "table"}, r"Option 'source' must be 'log'.*or 'table\+tail'"),
    ({"odradek.iceberg.catalog.uri": "sqlite:///x.db"}, r"name the Iceberg catalog of source=table\+tail"),
    ({"source": "table+tail", "kafka.isolation.level": "read_uncommitted"}, r"committed records only"),
    ({"source": "table+tail", "startingTimestamp": "1"}, r"'startingTimestamp' is not supported with source=table\+tail"),
    ({"source": "table+tail", "odradek.iceberg.catalog.type": "hive"}, r"must be sql or rest"),
    ({"source": "table+tail", "odradek.iceberg.catalog.type": "rest"}, r"needs odradek.iceberg.catalog.uri"),
    ({"source": "table+tail", "valueFormat": "avro"}, r"not supported with source=table\+tail"),
])
def test_table_tail_options_are_checked(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_source_options({"kafka.bootstrap.servers": "b:9092", "subscribe": "t", **options}, streaming=False)


def test_table_tail_is_a_batch_read_from_a_broker() -> None:
    base = {"kafka.bootstrap.servers": "b:9092", "subscribe": "t", "source": "table+tail"}
    with pytest.raises(ValueError, match=r"is a batch read"):
        parse_source_options(base, streaming=True)
    opts = parse_source_options(base, streaming=False)
    assert opts.source == "table+tail" and opts.isolation_level == "read_committed"
    assert opts.consumer_config["isolation.level"] == "read_committed"
    assert parse_source_options({**base, "odradek.iceberg.namespace": "ns"}, streaming=False).iceberg == {
        "odradek.iceberg.namespace": "ns"}


class _FakeAdmin:
    """The broker as catalog_settings asks it: DescribeConfigs of its settings (or a failure)."""

    def __init__(self, entries: dict[str, tuple[str | None, bool]] | None) -> None:
        self.entries = entries

    def describe_cluster(self) -> Any:
        from types import SimpleNamespace

        return SimpleNamespace(controller=SimpleNamespace(id=0), brokers=[])

    def describe_configs(self, resources: Any, **_: Any) -> Any:
        from types import SimpleNamespace

        if self.entries is None:
            raise PermissionError("DescribeConfigs denied")
        return {resources[0]: {k: SimpleNamespace(value=v, is_sensitive=s) for k, (v, s) in self.entries.items()}}


def test_the_catalog_is_the_brokers_unless_an_option_says_otherwise() -> None:
    from odradek.spark._table_tail import TableTailError, catalog_settings

    broker = _FakeAdmin({"log.dirs": ("/d1,/d2", False), "odradek.iceberg.catalog.type": ("sql", False),
                         "odradek.iceberg.catalog.uri": (None, False), "odradek.iceberg.namespace": ("odradek", False)})
    settings, data_dir = catalog_settings({}, broker)
    assert (settings.catalog_type, settings.catalog_uri, settings.namespace, data_dir) == ("sql", None, "odradek", Path("/d1"))
    settings, _ = catalog_settings({"odradek.iceberg.namespace": "ns", "odradek.iceberg.warehouse": "/w"}, broker)
    assert (settings.namespace, settings.warehouse) == ("ns", "/w")
    with pytest.raises(TableTailError, match=r"could not be described .*give the catalog as options"):
        catalog_settings({}, _FakeAdmin(None))
    settings, data_dir = catalog_settings({"odradek.iceberg.catalog.uri": "sqlite:////c.db"}, _FakeAdmin(None))
    assert (settings.catalog_uri, data_dir) == ("sqlite:////c.db", None)
    secret = _FakeAdmin({"odradek.iceberg.catalog.uri": (None, True)})
    with pytest.raises(TableTailError, match=r"catalog\.uri is sensitive"):
        catalog_settings({}, secret)
    assert catalog_settings({"odradek.iceberg.catalog.uri": "sqlite:////c.db"}, secret)[0].catalog_uri == "sqlite:////c.db"
