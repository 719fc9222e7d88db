"""Issue 47's first done-when, run for real: a ``value_schema`` topic with an Avro subject receives
records from 4 producers at once (one transactional, some of its transactions aborted) on a
3-broker cluster with one catalog; mid-stream the broker that is writing to the table is SIGKILLed
while it is in the middle of a commit (it has a file of the table open: /proc/PID/fd) and
restarted, and later a partition's leader is shut down so that another broker takes over its
writer.  Then the table, read through PyIceberg and through DuckDB, holds exactly what a
read_committed consumer reads from the log: compared by (topic, partition, offset), every typed
column, nothing twice, nothing missing, no aborted record.

The clients use the registry of the broker leading ``_schemas``, so that no registry read through
another broker brings that broker's view up to date for its writers: each writer must see the
subject by itself (it did not, before the writers read the view synced).

The record count is ``ODRADEK_TEST_TABLES_RECORDS`` (default 40,000 for CI; the issue's figure is
1,000,000).  The run prints its figures (records, time, transactions, the kill).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from tests.cluster.conftest import Cluster
from tests.cluster.test_replication import OVERRIDES as REPLICATION_OVERRIDES
from tests.cluster.test_replication import create_topic, isr_full

pytestmark = pytest.mark.slow
pytest.importorskip("pyiceberg")
pytest.importorskip("fastavro")

RECORDS = int(os.environ.get("ODRADEK_TEST_TABLES_RECORDS", "40000"))
TOPIC = "readings"
PARTITIONS = 3
#: records per transaction of the transactional producer; every fourth transaction is aborted
TXN_SIZE = 250
READING = {"type": "record", "name": "Reading", "namespace": "lake", "fields": [
    {"name": "id", "type": "long"},
    {"name": "source", "type": "string"},
    {"name": "seq", "type": "long"},
    {"name": "amount", "type": "double"},
    {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "note", "type": ["null", "string"], "default": None},
]}
#: the value columns, then the Kafka columns the comparison is keyed on
VALUE_COLUMNS = ["id", "source", "seq", "amount", "placed", "note"]
KEY_COLUMNS = ["kafka_topic", "kafka_partition", "kafka_offset"]
_BASE = datetime(2026, 12, 6, 18, 0, tzinfo=UTC)
#: the longest any phase may take (a deadline, not a measure: a 2-core machine sends a few thousand records/s)
LONG = 300 + RECORDS / 200


def _value(producer: int, seq: int) -> dict[str, Any]:
    return {"id": producer * 10_000_000_000 + seq, "source": f"producer-{producer}", "seq": seq,
            "amount": seq * 0.25 + producer, "placed": _BASE + timedelta(milliseconds=seq),
            "note": None if seq % 3 else f"n{producer}-{seq}"}


# -- the cluster's table files ------------------------------------------------------------------------


def _catalog(home: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog("odradek", uri=f"sqlite:///{home / 'catalog.db'}", warehouse=(home / "warehouse").as_uri())


def _table_files_open(pid: int, table_dir: str) -> list[str]:
    """The files under ``table_dir`` a broker process has open for writing now: it is in the middle
    of a commit (writing its Parquet data, Avro manifests or the new metadata JSON)."""
    out = []
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if not target.startswith(table_dir):
            continue
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as info:
                flags = next(int(ln.split()[1], 8) for ln in info if ln.startswith("flags:"))
        except (OSError, StopIteration):
            continue
        if flags & (os.O_WRONLY | os.O_RDWR):
            out.append(target)
    return out


def _metric(url: str, name: str) -> dict[tuple[str, int], float]:
    with urllib.request.urlopen(url, timeout=5) as answer:
        text = answer.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, value = line[len(name) + 1:].rsplit("} ", 1)
            parts = dict(kv.split("=", 1) for kv in labels.split(","))
            out[(parts["topic"].strip('"'), int(parts["partition"].strip('"')))] = float(value)
    return out


# -- the producers ------------------------------------------------------------------------------------


class Producers:
    """Three idempotent producers and one transactional one, each sending ``RECORDS // 4`` records
    serialized by confluent-kafka's AvroSerializer; ``gate`` holds them at a share of the stream
    until the test lets them on (so that the faults happen while records flow)."""

    def __init__(self, cluster: Cluster, registry_url: str) -> None:
        self.cluster, self.registry_url = cluster, registry_url
        self.per_producer = RECORDS // 4
        self.sent = [0, 0, 0, 0]
        self.acked: dict[tuple[int, int], tuple[int, int]] = {}  # (partition, offset) -> (producer, seq)
        self.acked_without_offset = 0
        self.errors: list[str] = []
        self.txns: dict[str, int] = {"committed": 0, "aborted": 0, "unknown": 0}
        #: the transactional producer's records by the outcome of their transaction
        self.committed_txn: dict[tuple[int, int], tuple[int, int]] = {}
        self.aborted_txn: dict[tuple[int, int], tuple[int, int]] = {}
        self.limit = self.per_producer  # a producer waits at this many records until raised
        self.moved = threading.Condition()
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._guard, args=(self._plain, i), daemon=True) for i in range(3)]
        self.threads.append(threading.Thread(target=self._guard, args=(self._transactional, 3), daemon=True))

    def _serializer(self) -> Any:
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.schema_registry.avro import AvroSerializer

        return AvroSerializer(SchemaRegistryClient({"url": self.registry_url}), json.dumps(READING),
                              conf={"auto.register.schemas": False, "use.latest.version": True})

    def _config(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.cluster.bootstrap, "acks": "all", "linger.ms": 20,
                "batch.num.messages": 2000, "message.timeout.ms": 300000, "topic.metadata.refresh.interval.ms": 1000,
                "queue.buffering.max.messages": 20000}

    def total_sent(self) -> int:
        return sum(self.sent)

    def sent_at_least(self, n: int) -> bool:
        """Whether ``n`` records were sent (or a producer failed: :meth:`check` says so)."""
        return bool(self.errors) or self.total_sent() >= n

    def check(self) -> None:
        assert not self.errors, self.errors[:5]

    def let_on(self, limit: int) -> None:
        with self.moved:
            self.limit = limit
            self.moved.notify_all()

    def _wait_gate(self, seq: int) -> None:
        with self.moved:
            while seq >= self.limit:
                self.moved.wait(1)

    def _guard(self, run: Callable[[int], None], producer: int) -> None:
        try:
            run(producer)
        except BaseException as exc:  # reported by the test
            self.errors.append(f"producer {producer}: {type(exc).__name__}: {exc}")

    def _plain(self, producer: int) -> None:
        from confluent_kafka.serialization import MessageField, SerializationContext

        ser = self._serializer()
        ctx = SerializationContext(TOPIC, MessageField.VALUE)
        p = ck.Producer({**self._config(), "enable.idempotence": True})

        def done(err: Any, msg: Any, seq: int) -> None:
            if err is not None:
                self.errors.append(f"producer {producer} seq {seq}: {err}")
            elif msg.offset() < 0:
                self.acked_without_offset += 1
            else:
                with self._lock:
                    self.acked[(msg.partition(), msg.offset())] = (producer, seq)

        for seq in range(self.per_producer):
            self._wait_gate(seq)
            value = ser(_value(producer, seq), ctx)
            extra: dict[str, Any] = {}
            if producer == 0:
                extra["key"] = f"k{seq % 97}".encode()  # keyed: the default partitioner
            elif producer == 2:
                extra["partition"] = seq % PARTITIONS
            while True:
                try:
                    p.produce(TOPIC, value, on_delivery=lambda e, m, s=seq: done(e, m, s), **extra)
                    break
                except BufferError:
                    p.poll(0.05)
            p.poll(0)
            self.sent[producer] = seq + 1
        assert p.flush(300) == 0, f"producer {producer}: records left unacknowledged"

    def _transactional(self, producer: int) -> None:
        from confluent_kafka.serialization import MessageField, SerializationContext

        ser = self._serializer()
        ctx = SerializationContext(TOPIC, MessageField.VALUE)
        config = {**self._config(), "transactional.id": f"done-when-{uuid.uuid4().hex[:6]}",
                  "transaction.timeout.ms": 30000, "message.timeout.ms": 30000}
        p = ck.Producer(config)
        p.init_transactions(120)
        seq = n = 0
        while seq < self.per_producer:
            self._wait_gate(seq)
            upto = min(seq + TXN_SIZE, self.per_producer)
            placed: dict[tuple[int, int], tuple[int, int]] = {}

            def done(err: Any, msg: Any, s: int, into: dict[tuple[int, int], tuple[int, int]] = placed) -> None:
                if err is None and msg.offset() >= 0:
                    into[(msg.partition(), msg.offset())] = (producer, s)

            abort = n % 4 == 1
            outcome = "unknown"
            try:
                p.begin_transaction()
                for s in range(seq, upto):
                    while True:
                        try:
                            p.produce(TOPIC, ser(_value(producer, s), ctx), partition=s % PARTITIONS,
                                      on_delivery=lambda e, m, s=s: done(e, m, s))
                            break
                        except BufferError:
                            p.poll(0.05)
                    p.poll(0)
                    self.sent[producer] = s + 1
                if abort:
                    p.flush(120)
                    p.abort_transaction(120)
                    outcome = "aborted"
                else:
                    p.commit_transaction(120)
                    outcome = "committed"
            except ck.KafkaException as exc:
                err = exc.args[0]
                if err.fatal():  # fenced or worse: a new producer (its init aborts what was open)
                    p = ck.Producer({**config})
                    p.init_transactions(120)
                else:
                    try:
                        p.abort_transaction(120)
                        outcome = "aborted"
                    except ck.KafkaException:
                        p = ck.Producer({**config})
                        p.init_transactions(120)
            self.txns[outcome] += 1
            with self._lock:
                if outcome == "committed":
                    self.committed_txn.update(placed)
                elif outcome == "aborted":
                    self.aborted_txn.update(placed)
            seq, n = upto, n + 1
        assert p.flush(120) == 0

    def start(self) -> Producers:
        for t in self.threads:
            t.start()
        return self

    def join(self, timeout: float) -> None:
        self.let_on(self.per_producer)
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in self.threads), f"producers still running after {timeout} s"


# -- what the log holds -------------------------------------------------------------------------------


def _committed_in_log(bootstrap: str, registry_url: str) -> Any:
    """Every record a read_committed consumer reads, its value decoded by confluent-kafka's
    AvroDeserializer, as an Arrow table of the key and value columns."""
    import pyarrow as pa
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    de = AvroDeserializer(SchemaRegistryClient({"url": registry_url}))
    ctx = SerializationContext(TOPIC, MessageField.VALUE)
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                     "enable.auto.commit": False, "isolation.level": "read_committed",
                     "enable.partition.eof": True, "fetch.max.bytes": 8 << 20})
    columns: dict[str, list[Any]] = {c: [] for c in KEY_COLUMNS + VALUE_COLUMNS}
    at_end: set[int] = set()
    deadline = time.monotonic() + LONG
    try:
        c.assign([ck.TopicPartition(TOPIC, p, ck.OFFSET_BEGINNING) for p in range(PARTITIONS)])
        while len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline, f"the log not read to its end in {LONG} s (at end: {at_end})"
            for m in c.consume(2000, 0.5):
                if m.error() is not None:
                    assert m.error().code() == ck.KafkaError._PARTITION_EOF, m.error()
                    at_end.add(m.partition())
                    continue
                v = de(m.value(), ctx)
                columns["kafka_topic"].append(m.topic())
                columns["kafka_partition"].append(m.partition())
                columns["kafka_offset"].append(m.offset())
                for name in VALUE_COLUMNS:
                    columns[name].append(v[name])
    finally:
        c.close()
    schema = _committed_in_log_schema()
    return pa.table({name: pa.array(values, type=schema.field(name).type) for name, values in columns.items()})


def _committed_in_log_schema() -> Any:
    import pyarrow as pa

    return pa.schema([("kafka_topic", pa.string()), ("kafka_partition", pa.int32()), ("kafka_offset", pa.int64()),
                      ("id", pa.int64()), ("source", pa.string()), ("seq", pa.int64()), ("amount", pa.float64()),
                      ("placed", pa.timestamp("us", tz="UTC")), ("note", pa.string())])


def _sorted(table: Any, schema: Any) -> Any:
    """The key and value columns in the log's types (nullability aside), in key order."""
    table = table.select(KEY_COLUMNS + VALUE_COLUMNS).cast(schema)
    return table.sort_by([("kafka_topic", "ascending"), ("kafka_partition", "ascending"),
                          ("kafka_offset", "ascending")]).combine_chunks()


def compare(got: Any, expected: Any, reader: str) -> None:
    """``got`` (a table as a reader returns it) holds exactly ``expected``'s rows, keyed by (topic,
    partition, offset): each once, and every column equal."""
    import numpy as np

    def keys(t: Any) -> Any:
        topics = t["kafka_topic"].to_numpy(zero_copy_only=False)
        assert set(topics) <= {TOPIC}, f"{reader}: rows of another topic {set(topics) - {TOPIC}}"
        return (t["kafka_partition"].to_numpy().astype(np.int64) << 40) | t["kafka_offset"].to_numpy()

    got = _sorted(got, expected.schema)
    exp = _sorted(expected, expected.schema)
    have, want = keys(got), keys(exp)
    values, counts = np.unique(have, return_counts=True)
    twice = values[counts > 1]
    missing = np.setdiff1d(want, values)
    extra = np.setdiff1d(values, want)

    def show(a: Any) -> list[tuple[int, int]]:
        return [(int(k) >> 40, int(k) & ((1 << 40) - 1)) for k in a[:5]]

    assert not len(twice), f"{reader}: {len(twice)} (partition, offset) twice, e.g. {show(twice)}"
    assert not len(missing), f"{reader}: {len(missing)} committed records missing, e.g. {show(missing)}"
    assert not len(extra), f"{reader}: {len(extra)} records not committed in the log, e.g. {show(extra)}"
    for name in VALUE_COLUMNS:
        assert got[name].equals(exp[name]), f"{reader}: column {name} differs from the log's values"


def _duckdb(location: str) -> Any:
    duckdb = pytest.importorskip("duckdb")
    iceberg_ext = pytest.importorskip("duckdb_extension_iceberg")
    avro_ext = pytest.importorskip("duckdb_extension_avro")
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone='UTC'")
        for ext, name in ((avro_ext, "avro"), (iceberg_ext, "iceberg")):
            path = next(Path(ext.__file__).parent.glob(f"extensions/*/{name}.duckdb_extension"))
            con.execute(f"LOAD '{path}'")
        cols = ", ".join(KEY_COLUMNS + VALUE_COLUMNS)
        return con.execute(f"SELECT {cols} FROM iceberg_scan('{location}')").to_arrow_table()
    finally:
        con.close()


# -- the scenario -------------------------------------------------------------------------------------


def test_committed_records_exactly_once_through_a_mid_commit_sigkill_and_a_failover(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    figures: dict[str, Any] = {"records": RECORDS}
    started = time.monotonic()
    home = tmp_path / "lake"
    (home / "warehouse").mkdir(parents=True)
    cluster = cluster_factory(3, {
        **REPLICATION_OVERRIDES, "auto.leader.rebalance.enable": False,
        "schema.registry.listeners": "http://127.0.0.1:0", "schema.registry.timeout.ms": 20000,
        "metrics.port": 0, "offsets.topic.num.partitions": 1, "transaction.state.log.num.partitions": 1,
        "group.initial.rebalance.delay.ms": 0,
        "odradek.iceberg.catalog.uri": f"sqlite:///{home / 'catalog.db'}",
        "odradek.iceberg.warehouse": str(home / "warehouse"),
    }, log_level="INFO")
    # the clients ask the registry of the broker leading _schemas: a registry read through another
    # broker's listener would bring that broker's view up to date, which its writers must do themselves
    warm_up = cluster.brokers[1].registry_url  # (the first registration creates _schemas)
    assert warm_up is not None
    SchemaRegistryClient({"url": warm_up}).register_schema("warm-up-value", Schema(json.dumps(READING), "AVRO"))
    schemas_leader = cluster.wait_for(lambda: cluster.leader("_schemas", 0), 30, "a leader of _schemas")
    registry = cluster.brokers[schemas_leader].registry_url
    assert registry is not None
    SchemaRegistryClient({"url": registry}).register_schema(f"{TOPIC}-value", Schema(json.dumps(READING), "AVRO"))
    create_topic(cluster.bootstrap, TOPIC, PARTITIONS, 3, config={
        "min.insync.replicas": "2", "odradek.iceberg.mode": "value_schema",
        "odradek.iceberg.commit.interval.ms": "200",
    })
    cluster.wait_for(lambda: isr_full(cluster, TOPIC, PARTITIONS), 30, "a full ISR")
    producers = Producers(cluster, registry)
    quarter = producers.per_producer // 4
    # they go on a little past a quarter, then step by step while a commit is looked for (so the
    # writers keep committing however fast or slow this machine is), and wait at three quarters
    # until the SIGKILL is done
    step = max(quarter // 32, 1)
    producers.let_on(quarter + step)
    producers.start()

    # 1. at a quarter of the stream: SIGKILL a broker while it commits to the table, restart it
    cluster.wait_for(lambda: producers.sent_at_least(RECORDS // 4), LONG, "a quarter sent")
    producers.check()
    catalog = _catalog(home)

    def every_partition_written() -> bool:
        snap = catalog.load_table(("odradek", TOPIC)).current_snapshot()
        return snap is not None and all(f"odradek.next-offset.{p}" in snap.summary.additional_properties
                                        for p in range(PARTITIONS))

    cluster.wait_for(every_partition_written, 120, "every partition's leader writing to the table")
    table_dir = str(home / "warehouse")
    victim, open_files = None, []
    deadline = time.monotonic() + 120
    next_step = time.monotonic()
    while victim is None and time.monotonic() < deadline:
        if time.monotonic() >= next_step and producers.limit < 3 * quarter:
            producers.let_on(min(producers.limit + step, 3 * quarter))
            next_step = time.monotonic() + 0.2
        for i in cluster.live_ids():
            # frozen while its open files are looked at, so what is seen is where it dies (a
            # commit cannot finish between the look and the SIGKILL, however slow this test runs)
            pid = cluster.brokers[i].pid
            os.kill(pid, signal.SIGSTOP)
            try:
                open_files = [f for f in _table_files_open(pid, table_dir) if "~dlq" not in f]
                if open_files:
                    cluster.kill(i)
                    victim = i
                    break
            finally:
                if victim is None:
                    os.kill(pid, signal.SIGCONT)
        else:
            time.sleep(0.001)
    assert victim is not None, "no broker was seen writing a commit for 120 s"
    producers.let_on(3 * quarter)
    figures["killed"] = (victim, [Path(f).name for f in open_files])
    cluster.wait_for(lambda: all(cluster.leader(TOPIC, p) not in (victim, None) for p in range(PARTITIONS)), 30,
                     "leaders other than the killed broker")
    cluster.start(victim)
    cluster.wait_for(lambda: isr_full(cluster, TOPIC, PARTITIONS), 120, "the killed broker back in the ISR")

    # 2. at three quarters: partition 0's leader shuts down; another broker takes over its writer
    cluster.wait_for(lambda: producers.sent_at_least(3 * RECORDS // 4 - 4), LONG,
                     "three quarters sent")
    producers.check()
    old = cluster.leader(TOPIC, 0)
    assert old is not None
    cluster.stop(old)
    new = cluster.wait_for(lambda: (lambda n: n if n not in (old, None) else None)(cluster.leader(TOPIC, 0)), 30,
                           "a new leader of partition 0")
    figures["failover"] = (old, new)
    producers.let_on(producers.per_producer)
    cluster.wait_for(lambda: producers.sent_at_least(RECORDS - 4), LONG, "every record sent")
    producers.check()
    cluster.start(old)
    producers.join(LONG)
    assert not producers.errors, producers.errors[:5]
    figures["produced_s"] = round(time.monotonic() - started, 1)
    figures["transactions"] = dict(producers.txns)

    # the writers catch up: each partition's leader reports lag 0

    def caught_up() -> bool:
        for p in range(PARTITIONS):
            leader = cluster.leader(TOPIC, p)
            url = cluster.brokers[leader].metrics_url if leader else None
            if url is None or _metric(url, "odradek_iceberg_writer_lag_records").get((TOPIC, p)) != 0:
                return False
        return True

    try:
        cluster.wait_for(caught_up, LONG, "writer lag 0 on every partition's leader")
    except AssertionError:
        for i in cluster.ids:
            print(f"broker {i}:", "".join(ln for ln in cluster.brokers[i].stderr_lines if "ceberg" in ln)[-8000:])
        raise
    figures["table_caught_up_s"] = round(time.monotonic() - started, 1)

    # the log: every acknowledged plain record, every committed transaction's, no aborted one
    now_registry = cluster.brokers[cluster.live_ids()[0]].registry_url  # (a restarted broker's port is new)
    assert now_registry is not None
    expected = _committed_in_log(cluster.bootstrap, now_registry)
    figures["committed_in_log"] = expected.num_rows
    in_log = dict(zip(zip(expected["kafka_partition"].to_pylist(), expected["kafka_offset"].to_pylist()),
                      zip(expected["source"].to_pylist(), expected["seq"].to_pylist())))
    for (p, o), (producer, seq) in [*producers.acked.items(), *producers.committed_txn.items()]:
        assert in_log.get((p, o)) == (f"producer-{producer}", seq), f"acknowledged ({p}, {o}) not in the log"
    assert not set(producers.aborted_txn) & set(in_log), "an aborted record read as committed"
    assert producers.aborted_txn, "no transaction was aborted"
    del in_log

    table = catalog.load_table(("odradek", TOPIC))
    assert not catalog.table_exists(("odradek", f"{TOPIC}~dlq")), "records went to the dead-letter table"

    # typed columns
    types = {f.name: str(f.field_type) for f in table.schema().fields}
    assert (types["id"], types["source"], types["seq"], types["amount"], types["placed"], types["note"]) == (
        "long", "string", "long", "double", "timestamptz", "string")
    assert (types["kafka_partition"], types["kafka_offset"]) == ("int", "long")

    # the SIGKILL was mid-commit: the files it had open are in no snapshot of the table
    referenced = {Path(f.file_path).name for task in table.scan().plan_files() for f in [task.file]}
    manifests = {Path(s.manifest_list).name for s in table.snapshots()}
    metadata = {Path(m.metadata_file).name for m in table.metadata.metadata_log} | {Path(table.metadata_location).name}
    figures["killed_commit_in_table"] = sorted(
        f for f in figures["killed"][1] if f in referenced | manifests | metadata)

    compare(table.scan().to_arrow(), expected, "PyIceberg")
    compare(_duckdb(table.metadata_location), expected, "DuckDB")
    figures["snapshots"] = len(table.snapshots())
    figures["total_s"] = round(time.monotonic() - started, 1)
    print(f"\ndone-when figures: {figures}")
    assert not figures["killed_commit_in_table"], "the SIGKILL came after the commit it saw was complete"


def test_the_comparison_catches_a_duplicate_a_gap_an_aborted_record_and_a_wrong_value() -> None:
    """What the scenario's comparison would report of a writer that got it wrong."""
    import pyarrow as pa

    rows = [{"kafka_topic": TOPIC, "kafka_partition": o % PARTITIONS, "kafka_offset": o // PARTITIONS,
             **_value(o % 4, o)} for o in range(30)]
    log = pa.Table.from_pylist(rows).cast(_committed_in_log_schema())
    compare(log, log, "the log itself")
    compare(log.take(list(reversed(range(30)))), log, "another order")
    with pytest.raises(AssertionError, match="twice"):
        compare(pa.concat_tables([log, log.slice(7, 1)]), log, "a row twice")
    with pytest.raises(AssertionError, match="missing"):
        compare(pa.concat_tables([log.slice(0, 7), log.slice(8)]), log, "a row missing")
    with pytest.raises(AssertionError, match="not committed"):
        compare(log, log.slice(1), "an aborted row")
    wrong = log.set_column(log.schema.get_field_index("amount"), "amount",
                           pa.array([r["amount"] + (i == 5) for i, r in enumerate(rows)]))
    with pytest.raises(AssertionError, match="column amount"):
        compare(wrong, log, "a wrong value")
