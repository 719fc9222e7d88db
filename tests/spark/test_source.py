"""``spark.read`` / ``spark.readStream`` with ``format("odradek")`` against a real broker.

Data is produced with confluent-kafka (librdkafka), so the offsets, timestamps and headers
checked are the ones an independent client was given.  Behaviour is checked against what
Spark's Kafka source documents: columns, startingOffsets / endingOffsets / timestamps,
subscribePattern, assign, minPartitions, maxOffsetsPerTrigger, Trigger.AvailableNow, new
partitions, failOnDataLoss, exactly-once to a file sink across a restart, and the replay of a
planned but uncommitted micro-batch over exactly the planned offsets.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from odradek.spark._offsets import rate_limit
from odradek.testing import BrokerProcess

from .spark_helpers import create_topic, produce, wait_for

pytestmark = pytest.mark.slow

COLUMNS = ["key", "value", "topic", "partition", "offset", "unix_millis(timestamp) AS ts", "timestampType", "headers"]


def _reader(spark: Any, broker: BrokerProcess, **options: Any) -> Any:
    r = spark.read.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _stream(spark: Any, broker: BrokerProcess, **options: Any) -> Any:
    r = spark.readStream.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _records(n: int, partitions: int, start: int = 0, **extra: Any) -> list[dict[str, Any]]:
    return [{"value": b"v%d" % i, "partition": i % partitions, **extra} for i in range(start, start + n)]


def _po(rows: list[Any]) -> list[tuple[int, int]]:
    return sorted((r["partition"], r["offset"]) for r in rows)


def _offsets_log(checkpoint: Path, batch: int) -> dict[str, Any]:
    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    return json.loads(lines[-1])


def _batch_ids(checkpoint: Path, log: str) -> list[int]:
    return sorted(int(name) for name in os.listdir(checkpoint / log) if name.isdigit())


# -- batch reads ---------------------------------------------------------------------------------


def test_batch_read_returns_exactly_the_produced_rows(spark: Any, broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 3)
    records = []
    for i in range(300):
        records.append(
            {
                "key": None if i % 7 == 0 else b"key-%d" % i,
                "value": None if i % 50 == 49 else (b"\x00\xff" * (i % 40)) + b"value-%d" % i,
                "partition": i % 3,
                "timestamp": 1_700_000_000_000 + i * 1000,
                "headers": [("h1", b"x%d" % i), ("h2", None)] if i % 4 == 0 else None,
            }
        )
    produced = produce(broker.bootstrap, topic, records)
    rows = _reader(spark, broker, subscribe=topic, includeHeaders="true").selectExpr(*COLUMNS).collect()
    got = sorted((r.asDict(recursive=True) for r in rows), key=lambda r: (r["partition"], r["offset"]))
    expected = [
        {
            "key": p["key"],
            "value": p["value"],
            "topic": topic,
            "partition": p["partition"],
            "offset": p["offset"],
            "ts": p["timestamp"],
            "timestampType": 0,
            "headers": [{"key": k, "value": v} for k, v in p["headers"]] if p["headers"] else None,
        }
        for p in produced
    ]
    for r in got:
        for field in ("key", "value"):
            r[field] = bytes(r[field]) if r[field] is not None else None
        if r["headers"]:
            r["headers"] = [{"key": h["key"], "value": bytes(h["value"]) if h["value"] is not None else None} for h in r["headers"]]
    assert got == expected
    # without includeHeaders there is no headers column, as in Spark's Kafka source
    assert _reader(spark, broker, subscribe=topic).columns == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType"
    ]


def test_the_sources_tasks_share_a_thread_safe_environment_map(spark: Any, broker: BrokerProcess, topic: str) -> None:
    """PySpark gives every function of a registered Python data source one map of worker
    environment variables, and a streaming query's driver-side runner adds keys to it as the
    query starts, on the query's own thread.  A java.util.HashMap there was torn by two queries
    starting at once (every task of a stage serialized meanwhile, or for the rest of the
    session, failed with java.io.OptionalDataException): register() makes it a ConcurrentHashMap."""
    env = spark._jsparkSession.sessionState().dataSourceManager().lookupDataSource("odradek").dataSourceCls().envVars()
    assert env.getClass().getName() == "java.util.concurrent.ConcurrentHashMap"
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, _records(40, 2))
    query = (
        _stream(spark, broker, subscribe=topic, startingOffsets="earliest")
        .writeStream.format("noop").trigger(availableNow=True).start()
    )
    assert query.awaitTermination(120) and query.exception() is None
    assert env.containsKey("SPARK_LOCAL_DIRS")  # added by the query's runner: to this very map


def test_log_append_time_topics_report_timestamp_type_1(spark: Any, broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 1, {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000) - 1
    produce(broker.bootstrap, topic, [{"value": b"a", "timestamp": 1_000}, {"value": b"b", "timestamp": 2_000}])
    rows = _reader(spark, broker, subscribe=topic).selectExpr("unix_millis(timestamp) AS ts", "timestampType").collect()
    assert [r.timestampType for r in rows] == [1, 1]
    assert all(r.ts >= before for r in rows)


def test_starting_and_ending_offsets(spark: Any, broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, _records(40, 2))  # 20 per partition
    def read(**opts: Any) -> list[tuple[int, int]]:
        return _po(_reader(spark, broker, subscribe=topic, **opts).select("partition", "offset").collect())

    every = [(p, o) for p in range(2) for o in range(20)]
    assert read() == every  # earliest .. latest by default
    assert read(startingOffsets="earliest", endingOffsets="latest") == every
    assert read(startingOffsets=json.dumps({topic: {"0": 5, "1": -2}}), endingOffsets=json.dumps({topic: {"0": 8, "1": 3}})) == [
        (0, 5), (0, 6), (0, 7), (1, 0), (1, 1), (1, 2)
    ]
    assert read(startingOffsets=json.dumps({topic: {"0": 18, "1": 19}}), endingOffsets=json.dumps({topic: {"0": -1, "1": -1}})) == [
        (0, 18), (0, 19), (1, 19)
    ]
    with pytest.raises(Exception, match="starting offset can't be latest for batch queries"):
        _reader(spark, broker, subscribe=topic, startingOffsets="latest").collect()
    with pytest.raises(Exception, match="you must specify all TopicPartitions"):
        _reader(spark, broker, subscribe=topic, startingOffsets=json.dumps({topic: {"0": 1}})).collect()
    with pytest.raises(Exception, match=r"Beginning offset 25 is after the ending offset 20"):
        _reader(spark, broker, subscribe=topic, startingOffsets=json.dumps({topic: {"0": 15, "1": 25}})).collect()


def test_timestamps_select_offsets(spark: Any, broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 2)
    base = 1_700_000_000_000
    produce(broker.bootstrap, topic, [{"value": b"v%d" % i, "partition": i % 2, "timestamp": base + i * 1000} for i in range(20)])
    # partition 0 holds timestamps base+0,2,4..18 s at offsets 0..9; partition 1 base+1,3,..19 s
    rows = _reader(spark, broker, subscribe=topic, startingTimestamp=str(base + 10_000)).select("partition", "offset").collect()
    assert _po(rows) == [(0, o) for o in range(5, 10)] + [(1, o) for o in range(5, 10)]
    by_ts = json.dumps({topic: {"0": base + 15_000, "1": base}})
    ending = json.dumps({topic: {"0": base + 17_000, "1": base + 4_000}})
    rows = _reader(spark, broker, subscribe=topic, startingOffsetsByTimestamp=by_ts, endingOffsetsByTimestamp=ending).collect()
    assert _po(rows) == [(0, 8), (1, 0), (1, 1)]
    # no record that late: an error by default, the latest offset with the "latest" strategy
    late = str(base + 10**9)
    with pytest.raises(Exception, match="No offset matched"):
        _reader(spark, broker, subscribe=topic, startingTimestamp=late).collect()
    assert _reader(spark, broker, subscribe=topic, startingTimestamp=late, startingOffsetsByTimestampStrategy="latest").count() == 0


def test_subscribe_pattern_and_assign(spark: Any, broker: BrokerProcess, topic: str) -> None:
    for suffix, n in (("a", 1), ("b", 2), ("other", 1)):
        create_topic(broker.bootstrap, f"{topic}-{suffix}", n)
        produce(broker.bootstrap, f"{topic}-{suffix}", _records(6, n))
    got = _reader(spark, broker, subscribePattern=re.escape(topic) + "-[ab]").select("topic", "partition").collect()
    assert sorted({(r.topic, r.partition) for r in got}) == [(f"{topic}-a", 0), (f"{topic}-b", 0), (f"{topic}-b", 1)]
    assert len(got) == 12
    # the pattern must match the whole name, as Java's Pattern.matches
    assert _reader(spark, broker, subscribePattern=re.escape(topic) + "-").count() == 0
    assigned = _reader(spark, broker, assign=json.dumps({f"{topic}-b": [1], f"{topic}-other": [0]})).select("topic", "partition").collect()
    assert sorted({(r.topic, r.partition) for r in assigned}) == [(f"{topic}-b", 1), (f"{topic}-other", 0)]
    assert len(assigned) == 9
    # subscribe to several topics, one of which does not exist (yet): nothing from it
    assert _reader(spark, broker, subscribe=f"{topic}-a, {topic}-missing").count() == 6


def test_min_partitions_splits_partitions_into_offset_ranges(spark: Any, broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, [{"value": b"x%d" % i, "partition": 0 if i < 300 else 1} for i in range(400)])
    df = _reader(spark, broker, subscribe=topic, minPartitions="8")
    # 300 and 100 records, 8 wanted: 50 per piece -> 6 + 2 ranges
    assert df.rdd.getNumPartitions() == 8
    sizes = sorted(df.rdd.mapPartitions(lambda it: [sum(1 for _ in it)]).collect())
    assert sizes == [50] * 8
    assert _po(df.select("partition", "offset").collect()) == [(0, o) for o in range(300)] + [(1, o) for o in range(100)]
    assert _reader(spark, broker, subscribe=topic).rdd.getNumPartitions() == 2
    assert _reader(spark, broker, subscribe=topic, maxRecordsPerPartition="120").rdd.getNumPartitions() == 3 + 1


# -- streaming -----------------------------------------------------------------------------------


def test_stream_to_parquet_stopped_and_restarted_writes_every_record_once(
    spark: Any, broker: BrokerProcess, topic: str, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, topic, 3)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    produce(broker.bootstrap, topic, _records(300, 3))
    total = [300]
    stop = threading.Event()

    def keep_producing() -> None:
        i = 300
        while not stop.is_set():
            produce(broker.bootstrap, topic, _records(40, 3, start=i))
            i += 40
            total[0] = i
            time.sleep(0.05)

    def start(**trigger: Any) -> Any:
        df = _stream(spark, broker, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="150")
        w = df.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
        return w.trigger(**trigger).start() if trigger else w.start()

    producer = threading.Thread(target=keep_producing, daemon=True)
    producer.start()
    query = start()
    try:
        wait_for(lambda: len(_batch_ids(checkpoint, "commits")) >= 3 if (checkpoint / "commits").exists() else False, what="3 batches")
    finally:
        query.stop()  # wherever it is: possibly in the middle of a batch
        stop.set()
        producer.join()
    assert query.exception() is None
    produced = total[0]
    query = start(availableNow=True)  # restart and drain
    query.awaitTermination(120)
    assert query.exception() is None
    rows = spark.read.parquet(str(out)).select("partition", "offset", "value").collect()
    assert len(rows) == produced
    assert len({(r.partition, r.offset) for r in rows}) == produced
    assert sorted(bytes(r.value) for r in rows) == sorted(b"v%d" % i for i in range(produced))


def _foreach_recorder(seen: list[tuple[int, int, int]], fail_on: int | None = None) -> Any:
    def record(df: Any, batch_id: int) -> None:
        rows = df.select("partition", "offset").collect()
        seen.extend((batch_id, r.partition, r.offset) for r in rows)
        if fail_on is not None and batch_id == fail_on:
            raise RuntimeError(f"crash in batch {batch_id}")

    return record


@pytest.mark.parametrize("interruption", ["commit-removed", "crash-in-batch", "crash-in-first-batch"])
def test_replayed_batch_covers_exactly_the_planned_offsets(
    spark: Any, broker: BrokerProcess, topic: str, tmp_path: Path, interruption: str
) -> None:
    create_topic(broker.bootstrap, topic, 2)
    checkpoint = tmp_path / "checkpoint"
    produce(broker.bootstrap, topic, _records(100, 2))  # 50 per partition

    def run(seen: list, fail_on: int | None = None) -> Any:
        df = _stream(spark, broker, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="40")
        q = (
            df.writeStream.foreachBatch(_foreach_recorder(seen, fail_on))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        with contextlib.suppress(Exception):
            q.awaitTermination(120)
        return q

    first: list[tuple[int, int, int]] = []
    if interruption == "commit-removed":
        q = run(first)
        assert q.exception() is None
        assert _batch_ids(checkpoint, "offsets") == [0, 1, 2]
        victim = 2
        (checkpoint / "commits" / str(victim)).unlink()
        crc = checkpoint / "commits" / f".{victim}.crc"
        if crc.exists():
            crc.unlink()
    else:
        victim = 1 if interruption == "crash-in-batch" else 0
        q = run(first, fail_on=victim)
        assert q.exception() is not None and f"crash in batch {victim}" in str(q.exception())
        assert _batch_ids(checkpoint, "offsets") == list(range(victim + 1))
        assert _batch_ids(checkpoint, "commits") == list(range(victim))
    planned_end = _offsets_log(checkpoint, victim)
    # the first batch starts at the initial offsets: startingOffsets=earliest
    planned_start = _offsets_log(checkpoint, victim - 1) if victim else {topic: {"0": 0, "1": 0}}
    planned = sorted(
        (int(p), o) for p in planned_end[topic] for o in range(planned_start[topic][p], planned_end[topic][p])
    )
    assert planned, "the interrupted batch had records to read"
    assert sorted((p, o) for b, p, o in first if b == victim) == planned

    produce(broker.bootstrap, topic, _records(60, 2, start=100))  # more data before the restart
    second: list[tuple[int, int, int]] = []
    q = run(second)
    assert q.exception() is None
    assert _offsets_log(checkpoint, victim) == planned_end  # the log was not rewritten
    replayed = sorted((p, o) for b, p, o in second if b == victim)
    assert replayed == planned  # exactly the planned ranges, none of the new records
    assert min(b for b, _, _ in second) == victim
    # every record once across the committed batches of both runs
    committed_first = [(p, o) for b, p, o in first if b < victim]
    everything = sorted(committed_first + [(p, o) for _, p, o in second])
    assert everything == [(p, o) for p in range(2) for o in range(80)]


def test_max_offsets_per_trigger_and_available_now(spark: Any, broker: BrokerProcess, topic: str, tmp_path: Path) -> None:
    create_topic(broker.bootstrap, topic, 3)
    produce(broker.bootstrap, topic, [{"value": b"x", "partition": p} for p, n in ((0, 300), (1, 100), (2, 5)) for _ in range(n)])
    checkpoint = tmp_path / "checkpoint"
    seen: list[tuple[int, int, int]] = []
    recorder = _foreach_recorder(seen)

    def record(df: Any, batch_id: int) -> None:
        recorder(df, batch_id)
        if batch_id == 0:  # produced after the query started: not for this AvailableNow run
            produce(broker.bootstrap, topic, [{"value": b"late", "partition": 0}] * 50)

    q = (
        _stream(spark, broker, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="100")
        .writeStream.foreachBatch(record)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert q.exception() is None
    batches = sorted({b for b, _, _ in seen})
    sizes = [sum(1 for b, _, _ in seen if b == i) for i in batches]
    # 405 records, at most 100 a batch, spread in proportion; none of the late ones
    expected, at, end = [], dict.fromkeys(((topic, 0), (topic, 1), (topic, 2)), 0), {(topic, 0): 300, (topic, 1): 100, (topic, 2): 5}
    while at != end:
        nxt = rate_limit(100, at, end)
        expected.append(sum(nxt.values()) - sum(at.values()))
        at = nxt
    assert sizes == expected and max(sizes) <= 100 and sum(sizes) == 405
    # the first batch spreads the limit in proportion to what each partition has: 300:100:5
    assert _offsets_log(checkpoint, 0) == {topic: {"0": 74, "1": 24, "2": 1}}
    assert sorted((p, o) for _, p, o in seen) == sorted((p, o) for p, n in ((0, 300), (1, 100), (2, 5)) for o in range(n))
    assert [pr["numInputRows"] for pr in q.recentProgress if pr["numInputRows"]] == sizes


def test_starting_offsets_latest_reads_only_new_records(spark: Any, broker: BrokerProcess, topic: str, tmp_path: Path) -> None:
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, _records(20, 2))
    seen: list[tuple[int, int, int]] = []
    q = (
        _stream(spark, broker, subscribe=topic)  # startingOffsets=latest is the streaming default
        .writeStream.foreachBatch(_foreach_recorder(seen))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        wait_for(lambda: (tmp_path / "checkpoint" / "commits" / "0").exists(), what="first batch")
        produce(broker.bootstrap, topic, _records(10, 2, start=20))
        wait_for(lambda: len(seen) >= 10, what="new records")
    finally:
        q.stop()
    assert _offsets_log(tmp_path / "checkpoint", 0) == {topic: {"0": 10, "1": 10}}
    assert sorted((p, o) for _, p, o in seen) == [(p, o) for p in range(2) for o in range(10, 15)]


def test_partitions_and_topics_added_later_are_read_from_their_beginning(
    spark: Any, broker: BrokerProcess, topic: str, tmp_path: Path
) -> None:
    from odradek.client import Admin

    create_topic(broker.bootstrap, f"{topic}-1", 1)
    produce(broker.bootstrap, f"{topic}-1", _records(5, 1))
    checkpoint = tmp_path / "checkpoint"

    def run() -> list[tuple[int, str, int, int]]:
        seen: list[tuple[int, str, int, int]] = []

        def record(df: Any, batch_id: int) -> None:
            seen.extend((batch_id, r.topic, r.partition, r.offset) for r in df.select("topic", "partition", "offset").collect())

        q = (
            _stream(spark, broker, subscribePattern=re.escape(topic) + "-[0-9]+", startingOffsets="earliest")
            .writeStream.foreachBatch(record)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        assert q.exception() is None
        return seen

    assert sorted((t, p, o) for _, t, p, o in run()) == [(f"{topic}-1", 0, o) for o in range(5)]
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_partitions({f"{topic}-1": 3})
    produce(broker.bootstrap, f"{topic}-1", [{"value": b"n", "partition": p} for p in (0, 1, 2, 2)])
    create_topic(broker.bootstrap, f"{topic}-2", 1)
    produce(broker.bootstrap, f"{topic}-2", _records(3, 1))
    second = sorted((t, p, o) for _, t, p, o in run())
    assert second == [(f"{topic}-1", 0, 5), (f"{topic}-1", 1, 0), (f"{topic}-1", 2, 0), (f"{topic}-1", 2, 1)] + [
        (f"{topic}-2", 0, o) for o in range(3)
    ]


def test_records_removed_by_retention_fail_or_are_skipped(
    spark: Any, broker: BrokerProcess, topic: str, tmp_path: Path
) -> None:
    from odradek.client import Admin

    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, _records(50, 1))
    checkpoint = tmp_path / "checkpoint"

    def run(fail_on_data_loss: str) -> tuple[Any, list[tuple[int, int, int]]]:
        seen: list[tuple[int, int, int]] = []
        q = (
            _stream(spark, broker, subscribe=topic, startingOffsets="earliest", failOnDataLoss=fail_on_data_loss)
            .writeStream.foreachBatch(_foreach_recorder(seen))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        with contextlib.suppress(Exception):
            q.awaitTermination(120)
        return q, seen

    q, seen = run("true")
    assert q.exception() is None and len(seen) == 50
    produce(broker.bootstrap, topic, _records(50, 1, start=50))
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.delete_records({(topic, 0): 70})  # as retention would: offsets 50..69 are gone
    q, seen = run("true")
    assert q.exception() is not None
    assert "failOnDataLoss" in str(q.exception()) and "50" in str(q.exception())
    q, seen = run("false")  # the same planned batch, now skipping what is gone
    assert q.exception() is None
    assert sorted(o for _, _, o in seen) == list(range(70, 100))


def test_min_offsets_per_trigger_waits_for_enough_records_or_max_trigger_delay(
    spark: Any, broker: BrokerProcess, topic: str, tmp_path: Path
) -> None:
    """Spark's minOffsetsPerTrigger: the first batch runs at once; afterwards no batch starts
    while fewer than 100 new offsets are there, until maxTriggerDelay (3 s) has passed since
    the last batch; 100 or more start one at the next trigger (every 100 ms)."""
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, _records(10, 2))
    checkpoint = tmp_path / "checkpoint"
    batches: dict[int, int] = {}  # batch id -> rows

    def record(df: Any, batch_id: int) -> None:
        batches[batch_id] = df.count()

    q = (
        _stream(spark, broker, subscribe=topic, startingOffsets="earliest", minOffsetsPerTrigger="100", maxTriggerDelay="3s")
        .writeStream.foreachBatch(record)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        wait_for(lambda: batches, 60, "the first batch")
        produce(broker.bootstrap, topic, _records(30, 2, start=10))
        wait_for(lambda: sum(batches.values()) >= 40, 60, "the delayed batch")
        produce(broker.bootstrap, topic, _records(150, 2, start=40))
        wait_for(lambda: sum(batches.values()) >= 190, 60, "the 150 records")
    finally:
        q.stop()
    assert q.exception() is None
    assert sum(batches.values()) == 190
    assert batches[0] == 10  # the first batch is not delayed
    # when each batch was triggered (Spark's own record of it, in the offset log)
    started = {b: json.loads((checkpoint / "offsets" / str(b)).read_text().splitlines()[1])["batchTimestampMs"] for b in batches}
    ids = sorted(b for b in batches if batches[b])
    small = [b for b in ids[1:] if batches[b] < 100]
    assert small, batches  # the 30 records waited for maxTriggerDelay
    for b in small:  # ~3 s after the batch before it (give or take the time to plan a batch)
        before = max(i for i in ids if i < b)
        assert started[b] - started[before] >= 2500, (b, started)
    assert any(batches[b] >= 100 for b in ids[1:])  # enough records: no waiting


def test_min_offsets_above_max_offsets_is_refused(spark: Any, broker: BrokerProcess, topic: str) -> None:
    with pytest.raises(Exception, match=r"minOffsetPerTrigger\(50\) is higher than the maxOffsetsPerTrigger\(10\)"):
        _stream(spark, broker, subscribe=topic, minOffsetsPerTrigger="50", maxOffsetsPerTrigger="10")


def test_read_committed_skips_aborted_records_and_stops_at_the_open_transaction(
    spark: Any, broker: BrokerProcess, topic: str
) -> None:
    """kafka.isolation.level=read_committed: aborted records are skipped, the markers' offsets
    are gaps, and "latest" is the last stable offset (an open transaction holds it)."""
    import confluent_kafka as ck

    bs = broker.bootstrap
    p = ck.Producer({"bootstrap.servers": bs, "transactional.id": f"spark-{topic}"})
    p.init_transactions(30)
    for commit in (True, False, True):
        p.begin_transaction()
        for i in range(3):
            p.produce(topic, b"%s%d" % (b"c" if commit else b"a", i), partition=0)
        p.flush(30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"open", partition=0)
    p.flush(30)
    committed = _reader(spark, broker, subscribe=topic, **{"kafka.isolation.level": "read_committed"})
    rows = committed.select("value", "offset").orderBy("offset").collect()
    # offsets 0-2, marker 3, aborted 4-6, marker 7, 8-10, marker 11; the open transaction from 12
    assert [(bytes(r.value), r.offset) for r in rows] == [
        (b"c0", 0), (b"c1", 1), (b"c2", 2), (b"c0", 8), (b"c1", 9), (b"c2", 10),
    ]
    everything = _reader(spark, broker, subscribe=topic)
    assert everything.count() == 10  # read_uncommitted: the aborted and the open records too
    p.abort_transaction(30)
