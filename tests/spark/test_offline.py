"""Spark's offline read: ``spark.read.format("odradek").option("path", DIR)`` reads segment files
with no broker in the path.

The oracle is the network read of the same ranges (``kafka.bootstrap.servers``) from the broker
that wrote the files: the rows must be the same, offsets and timestamps included, for v2 batches
in every codec, magic 0 and 1 message sets written by kafka-python with old API versions, and a
compacted topic.  Then reads racing a producer, damaged copies, and (without Spark) planning,
seeking through the indexes, recovery points and options.
"""

from __future__ import annotations

import itertools
import shutil
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")

from odradek.records import BatchBuilder, Compression, LegacyBatchBuilder, iter_batch_headers, read_batches
from odradek.spark._offline import (
    FileOffsetReader,
    find_partitions,
    parse_offline_options,
    plan_offline,
    read_offline,
)
from odradek.storage import LogManager
from odradek.storage.checkpoint import RECOVERY_POINT, read_offsets, write_offsets
from odradek.storage.reader import SegmentDamageError, SegmentReader
from odradek.testing import BrokerProcess

from .spark_helpers import create_topic, wait_for

TS0 = 1_700_000_000_000
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


# -- helpers -------------------------------------------------------------------------------------


def _rows(df: Any) -> list[tuple[Any, ...]]:
    out = []
    for r in df.collect():
        headers = None
        if "headers" in r and r["headers"] is not None:
            headers = tuple(
                (h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"]
            )
        key = None if r["key"] is None else bytes(r["key"])
        value = None if r["value"] is None else bytes(r["value"])
        out.append(
            (r["topic"], r["partition"], r["offset"], key, value, r["timestamp"], r["timestampType"], headers)
        )
    return sorted(out)


def _network(spark: Any, broker: BrokerProcess, topic: str, **options: Any) -> list[tuple[Any, ...]]:
    r = (
        spark.read.format("odradek")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
    )
    for k, v in {"includeHeaders": "true", **options}.items():
        r = r.option(k, v)
    return _rows(r.load())


def _offline_df(spark: Any, path: Path | str, topic: str | None = None, **options: Any) -> Any:
    r = spark.read.format("odradek").option("path", str(path))
    if topic is not None:
        r = r.option("subscribe", topic)
    for k, v in {"includeHeaders": "true", **options}.items():
        r = r.option(k, v)
    return r.load()


def _offline(spark: Any, path: Path | str, topic: str | None = None, **options: Any) -> list[tuple[Any, ...]]:
    return _rows(_offline_df(spark, path, topic, **options))


def _confluent_produce(bootstrap: str, topic: str, records: list[dict[str, Any]], **conf: Any) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True, **conf})
    errors: list[Any] = []
    for rec in records:
        p.produce(topic, on_delivery=lambda err, _m: errors.append(err) if err else None, **rec)
    assert p.flush(30) == 0
    assert not errors, errors


def _kafka_python_produce(
    bootstrap: str, topic: str, api_version: tuple[int, ...], codec: str | None, n: int, tag: str
) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(
        bootstrap_servers=bootstrap,
        api_version=api_version,
        compression_type=codec,
        linger_ms=5,
        request_timeout_ms=10000,
    )
    try:
        futures = [
            p.send(
                topic,
                key=None if i % 5 == 0 else b"k-%d" % i,
                value=b"%s-%d" % (tag.encode(), i),
                partition=0,
                timestamp_ms=TS0 + i,
            )
            for i in range(n)
        ]
        p.flush(30)
        for f in futures:
            f.get(timeout=30)
    finally:
        p.close()


def _latest(bootstrap: str, topic: str) -> dict[tuple[str, int], int]:
    from odradek.client import Admin

    with Admin({"bootstrap.servers": bootstrap}) as admin:
        parts = [p.partition for p in admin.describe_topics([topic])[topic].partitions]
        res = admin.list_offsets({(topic, p): "latest" for p in parts})
    return {tp: int(info.offset) for tp, info in res.items()}


def _flushed(broker: BrokerProcess, topic: str) -> None:
    """Wait until the broker's recovery-point checkpoint covers the whole topic (flush.messages=1)."""
    latest = _latest(broker.bootstrap, topic)

    def done() -> bool:
        points = read_offsets(broker.data_dir / RECOVERY_POINT)
        return all(points.get(tp, -1) >= end for tp, end in latest.items())

    wait_for(done, 30, f"the recovery points of {topic}")


# -- the broker and its data ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def data_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker that flushes every append (its recovery points follow the log end) and
    checkpoints and compacts often, with a topic of every codec, one of magic 0/1 message sets
    and a compacted one."""
    proc = BrokerProcess(
        tmp_path_factory.mktemp("offline") / "data",
        overrides={
            "num.partitions": 1,
            "auto.create.topics.enable": "true",
            "log.flush.interval.messages": 1,
            "replica.high.watermark.checkpoint.interval.ms": 100,
            "log.cleaner.backoff.ms": 100,
        },
    )
    proc.start()
    try:
        bootstrap = proc.bootstrap
        create_topic(bootstrap, "codecs", 2)
        n = 0
        for codec in CODECS:
            records = []
            for _ in range(150):
                records.append(
                    {
                        "key": None if n % 7 == 0 else b"key-%d" % n,
                        "value": None
                        if n % 31 == 30
                        else b"%s-value-%d-" % (codec.encode(), n) * (1 + n % 5),
                        "partition": n % 2,
                        "timestamp": TS0 + 10 * n,
                        "headers": [("h", b"%d" % n), ("empty", None)] if n % 3 == 0 else None,
                    }
                )
                n += 1
            _confluent_produce(bootstrap, "codecs", records, **{"compression.type": codec})
        create_topic(bootstrap, "legacy", 1)
        for version, codec in (
            ((0, 9), None),
            ((0, 9), "gzip"),
            ((0, 10, 1), None),
            ((0, 10, 1), "snappy"),
            ((0, 10, 1), "lz4"),
        ):
            _kafka_python_produce(bootstrap, "legacy", version, codec, 40, f"{version}-{codec}")
        create_topic(
            bootstrap,
            "compacted",
            1,
            {"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01"},
        )
        _confluent_produce(
            bootstrap,
            "compacted",
            [
                {"key": b"key-%d" % (i % 25), "value": b"value-%d" % i, "timestamp": TS0 + i}
                for i in range(800)
            ],
            **{"linger.ms": 0, "batch.size": 1500},
        )
        part = proc.data_dir / "compacted-0"

        def count() -> int:
            try:
                return sum(
                    len(b.records) for s in sorted(part.glob("*.log")) for b in read_batches(s.read_bytes())
                )
            except FileNotFoundError:  # a segment swapped out meanwhile
                return -2

        seen = [-1]

        def compacted() -> bool:  # and settled: a pass swaps groups of segments one after another
            before, seen[0] = seen[0], count()
            if seen[0] >= 400 or seen[0] != before:
                time.sleep(0.5)
                return False
            return True

        wait_for(compacted, 60, "compaction of topic compacted")
        for topic in ("codecs", "legacy", "compacted"):
            _flushed(proc, topic)
        yield proc
    finally:
        proc.stop()


# -- offline read == network read ----------------------------------------------------------------


def test_offline_read_returns_the_network_rows(spark: Any, data_broker: BrokerProcess) -> None:
    data = data_broker.data_dir
    magics = {b.magic for s in (data / "legacy-0").glob("*.log") for b in read_batches(s.read_bytes())}
    assert magics == {2}  # produced as v0/v1, stored as v2 as Kafka 3+ stores them (decoding v0/v1: test_decode)
    codecs = {b.compression for s in (data / "codecs-0").glob("*.log") for b in read_batches(s.read_bytes())}
    assert len(codecs) == 5

    for topic in ("codecs", "legacy", "compacted"):
        network = _network(spark, data_broker, topic, startingOffsets="earliest")
        offline = _offline(spark, data, topic)
        assert offline == network, topic
        assert len(offline) > 100
    compacted = _network(spark, data_broker, "compacted", startingOffsets="earliest")
    offsets = [r[2] for r in compacted]
    assert offsets != list(range(len(offsets)))  # gaps: compaction shows as it is on disk

    # the same ranges by offsets and by timestamps (seeks through the offset and time indexes)
    ranges: list[dict[str, str]] = [
        {"startingOffsets": '{"codecs":{"0":37,"1":-2}}', "endingOffsets": '{"codecs":{"0":301,"1":-1}}'},
        {"startingTimestamp": str(TS0 + 10 * 333 + 5)},
        {
            "startingOffsetsByTimestamp": f'{{"codecs":{{"0":{TS0 + 1000},"1":{TS0 + 5000}}}}}',
            "endingOffsetsByTimestamp": f'{{"codecs":{{"0":{TS0 + 6000},"1":{TS0 + 7000}}}}}',
        },
    ]
    for options in ranges:
        network = _network(spark, data_broker, "codecs", **options)
        assert _offline(spark, data, "codecs", **options) == network, options
        assert network
    start = offsets[len(offsets) // 2] + 1  # may fall into a gap left by compaction
    options = {
        "startingOffsets": f'{{"compacted":{{"0":{start}}}}}',
        "endingOffsets": f'{{"compacted":{{"0":{offsets[-1]}}}}}',
    }
    assert _offline(spark, data, "compacted", **options) == _network(
        spark, data_broker, "compacted", **options
    )

    # a partition directory on its own; a big partition read as several tasks of whole segments
    assert _offline(spark, data / "legacy-0") == _network(
        spark, data_broker, "legacy", startingOffsets="earliest"
    )
    split = _offline_df(spark, data, "compacted", maxBytesPerPartition="4096")
    assert split.rdd.getNumPartitions() > 1
    assert _rows(split) == compacted
    assert _rows(_offline_df(spark, data, subscribePattern="co.*")) == sorted(
        _network(spark, data_broker, "codecs", startingOffsets="earliest") + compacted
    )


def test_reads_while_a_producer_appends_return_whole_batches(spark: Any, data_broker: BrokerProcess) -> None:
    from confluent_kafka import Producer

    topic = "live"
    create_topic(data_broker.bootstrap, topic, 1)
    stop = threading.Event()
    produced = [0]

    def produce() -> None:
        p = Producer({"bootstrap.servers": data_broker.bootstrap, "linger.ms": 2, "enable.idempotence": True})
        i = 0
        while not stop.is_set():
            time.sleep(0.01)  # about 10,000 records a second, in batches of all sizes
            for _ in range(100):
                while True:
                    try:
                        p.produce(topic, value=b"%d" % i + b"." * (i % 300), partition=0)
                        break
                    except BufferError:
                        p.poll(0.01)
                i += 1
            p.poll(0)
        assert p.flush(30) == 0
        produced[0] = i

    writer = threading.Thread(target=produce, daemon=True)
    writer.start()
    results: list[list[int]] = []
    try:
        wait_for(lambda: (data_broker.data_dir / f"{topic}-0").exists(), 30, "the partition directory")
        deadline = time.monotonic() + 5
        options: list[dict[str, str]] = [{}, {"readPastRecoveryPoint": "true"}]
        while time.monotonic() < deadline or len(results) < 12:
            for opts in options:  # through Spark, capped at the recovery point and not
                rows = (
                    _offline_df(spark, data_broker.data_dir, topic, **opts)
                    .select("offset", "value")
                    .collect()
                )
                _check_values([(r["offset"], bytes(r["value"])) for r in rows])
                results.append(sorted(r["offset"] for r in rows))
            for _ in range(30):  # and many more times without Spark, racing the appends
                reader = parse_offline_options(
                    {"path": str(data_broker.data_dir / f"{topic}-0"), "readPastRecoveryPoint": "true"}
                )
                got = []
                for r in plan_offline(reader):
                    for batch in read_offline(r.directory, r.topic, r.partition, r.start, r.end):
                        got += zip(
                            batch.column("offset").to_pylist(), batch.column("value").to_pylist(), strict=True
                        )
                _check_values(got)
                results.append(sorted(o for o, _ in got))
    finally:
        stop.set()
        writer.join(60)
    assert produced[0] > 0
    # every read: offsets 0..n-1, n at the end of a batch as the broker wrote it
    ends = {0}
    for seg in sorted((data_broker.data_dir / f"{topic}-0").glob("*.log")):
        ends |= {h.last_offset + 1 for h in iter_batch_headers(seg.read_bytes())}
    for offsets in results:
        assert offsets == list(range(len(offsets)))
        assert len(offsets) in ends, len(offsets)
    assert max(len(r) for r in results) > 0


def _check_values(rows: list[tuple[int, bytes]]) -> None:
    for offset, value in rows:
        assert value == b"%d" % offset + b"." * (offset % 300), offset


# -- damage --------------------------------------------------------------------------------------


def test_damaged_copies_give_clear_errors_or_the_rows_before(
    spark: Any, data_broker: BrokerProcess, tmp_path: Path
) -> None:
    network = _network(spark, data_broker, "codecs", startingOffsets="earliest")
    part0 = [r for r in network if r[1] == 0]
    copy = tmp_path / "truncated" / "codecs-0"
    shutil.copytree(data_broker.data_dir / "codecs-0", copy)
    last = sorted(copy.glob("*.log"))[-1]
    data = last.read_bytes()
    headers = list(iter_batch_headers(data))
    last.write_bytes(data[:-10])  # the final batch cut short
    with pytest.raises(Exception) as err:
        _offline(spark, copy)
    message = str(err.value)
    assert (
        str(last) in message and f"byte position {headers[-1].position}" in message and "torn tail" in message
    )
    assert "stopAtCorruption" in message
    kept = _offline(spark, copy, stopAtCorruption="true")
    assert kept == [r for r in part0 if r[2] < headers[-1].base_offset]
    assert kept

    crc = tmp_path / "crc" / "codecs-0"
    shutil.copytree(data_broker.data_dir / "codecs-0", crc)
    seg = sorted(crc.glob("*.log"))[0]
    bad = bytearray(seg.read_bytes())
    middle = list(iter_batch_headers(bad))[len(headers) // 2]
    bad[middle.position + middle.size - 3] ^= 0xFF
    seg.write_bytes(bytes(bad))
    with pytest.raises(Exception) as err:
        _offline(spark, crc)
    message = str(err.value)
    assert str(seg) in message and f"byte position {middle.position}" in message and "CRC mismatch" in message
    assert _offline(spark, crc, stopAtCorruption="true") == [r for r in part0 if r[2] < middle.base_offset]


def test_offline_option_errors(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="does not exist"):
        _offline(spark, tmp_path / "nowhere")
    with pytest.raises(Exception, match="not both"):
        spark.read.format("odradek").option("path", str(tmp_path)).option(
            "logDirs", str(tmp_path)
        ).load().collect()
    with pytest.raises(Exception, match="batch read"):
        stream = spark.readStream.format("odradek").option("path", str(tmp_path)).load()
        query = stream.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ckpt")).start()
        try:
            query.awaitTermination(60)
        finally:
            query.stop()


# -- without Spark -------------------------------------------------------------------------------


def _write_log(
    root: Path, topic: str = "events", batches: int = 300, segment_bytes: int = 1 << 20
) -> LogManager:
    manager = LogManager([root], {"index.interval.bytes": 256, "segment.bytes": segment_bytes})
    log = manager.get_or_create(topic, 0)
    for i in range(batches):
        if i % 10 == 9:
            b2 = LegacyBatchBuilder(1, compression=Compression.GZIP)
            for j in range(4):
                b2.append(TS0 + 10 * i + j, b"k%d" % j, b"old-%d-%d" % (i, j))
            log.append(b2.build())
            continue
        b = BatchBuilder(compression=(Compression.NONE, Compression.GZIP, Compression.LZ4)[i % 3])
        for j in range(4):
            b.append(TS0 + 10 * i + j, b"k%d" % j, b"value-%d-%d" % (i, j), [("i", b"%d" % i)])
        log.append(b.build())
    return manager


def _read_all(options: dict[str, str]) -> list[tuple[int, bytes]]:
    out = []
    opts = parse_offline_options(options)
    for r in plan_offline(opts):
        for batch in read_offline(
            r.directory, r.topic, r.partition, r.start, r.end, stop_at_corruption=opts.stop_at_corruption
        ):
            out += zip(batch.column("offset").to_pylist(), batch.column("value").to_pylist(), strict=True)
    return sorted(out)


def _oracle(part: Path) -> list[tuple[int, bytes]]:
    out = []
    for seg in sorted(part.glob("*.log")):
        for b in read_batches(seg.read_bytes()):
            out += [(r.offset, r.value) for r in b.records]
    return out


def test_plan_and_read_without_spark(tmp_path: Path) -> None:
    _write_log(tmp_path, segment_bytes=8000).shutdown()
    part = tmp_path / "events-0"
    assert len(list(part.glob("*.log"))) > 3
    rows = _read_all({"path": str(tmp_path)})
    assert rows == _oracle(part) and len(rows) == 1200
    # segment runs of at most maxBytesPerPartition, split at segment boundaries
    opts = parse_offline_options({"path": str(part), "maxBytesPerPartition": "16000"})
    plan = plan_offline(opts)
    bases = {int(p.stem) for p in part.glob("*.log")}
    assert len(plan) > 1 and all(r.start in bases for r in plan)
    assert [(r.start, r.end) for r in plan] == sorted((r.start, r.end) for r in plan)
    assert plan[0].start == 0 and plan[-1].end == 1200
    assert all(a.end == b.start for a, b in itertools.pairwise(plan))
    assert _read_all(
        {
            "path": str(part),
            "startingOffsets": '{"events":{"0":501}}',
            "endingOffsets": '{"events":{"0":777}}',
        }
    ) == [r for r in rows if 501 <= r[0] < 777]


def test_the_read_seeks_through_the_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_log(tmp_path, batches=2000).shutdown()
    part = tmp_path / "events-0"
    size = sum(p.stat().st_size for p in part.glob("*.log"))
    read = SegmentReader.read
    counted = [0]

    def counting(self: SegmentReader, position: int, length: int) -> bytes:
        data = read(self, position, length)
        counted[0] += len(data)
        return data

    monkeypatch.setattr(SegmentReader, "read", counting)
    got = []
    for batch in read_offline(part, "events", 0, 7000, 7040):
        got += batch.column("offset").to_pylist()
    assert got == list(range(7000, 7040))
    # index entries lead to the batch holding offset 7000, a few headers are walked around it and
    # around offset 7040, and only the batches in between are read: not the whole segment
    assert counted[0] < 20_000 < size // 10, (counted[0], size)
    counted[0] = 0
    reader = FileOffsetReader(parse_offline_options({"path": str(part)}))
    assert reader.offset_for_timestamp(("events", 0), TS0 + 10 * 1500 + 2) == 6002
    assert counted[0] < 20_000, counted[0]  # the time index, not a scan of the segment


def test_the_recovery_point_caps_latest(tmp_path: Path) -> None:
    manager = _write_log(tmp_path, batches=50)
    # the broker checkpointed a recovery point at offset 102 (inside a batch): the read ends at
    # the start of that batch, and a torn append beyond it is nobody's business
    write_offsets(tmp_path / RECOVERY_POINT, {("events", 0): 102})
    seg = sorted((tmp_path / "events-0").glob("*.log"))[-1]
    with seg.open("ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\xc8\x00\x00\x01\x00")  # the start of an entry
    rows = _read_all({"path": str(tmp_path)})
    assert [o for o, _ in rows] == list(range(100))
    past = _read_all({"path": str(tmp_path), "readPastRecoveryPoint": "true"})
    assert [o for o, _ in past] == list(range(200))
    # the partition is not in the checkpoint yet (created since): nothing is flushed
    write_offsets(tmp_path / RECOVERY_POINT, {("other", 0): 5})
    assert _read_all({"path": str(tmp_path)}) == []
    # without a checkpoint (a copy of the partition directory) a torn tail is damage
    (tmp_path / RECOVERY_POINT).unlink()
    with pytest.raises(SegmentDamageError, match="torn tail") as err:
        _read_all({"path": str(tmp_path)})
    assert err.value.path == seg and err.value.position == seg.stat().st_size - 12
    assert [o for o, _ in _read_all({"path": str(tmp_path), "stopAtCorruption": "true"})] == list(range(200))
    manager.close()


def test_missing_data_is_data_loss(tmp_path: Path) -> None:
    _write_log(tmp_path, batches=20).shutdown()
    part = tmp_path / "events-0"
    with pytest.raises(Exception, match="the log ends at offset 80"):
        list(read_offline(part, "events", 0, 70, 90))
    assert sum(b.num_rows for b in read_offline(part, "events", 0, 70, 90, fail_on_data_loss=False)) == 10
    with pytest.raises(Exception, match="the log now starts at offset 0"):
        list(read_offline(part, "events", 0, -5, 3))


def test_partitions_and_options_are_checked(tmp_path: Path) -> None:
    _write_log(tmp_path / "a", "one").shutdown()
    _write_log(tmp_path / "b", "two", batches=3).shutdown()
    (tmp_path / "a" / "notes").mkdir()
    assert sorted(find_partitions([tmp_path / "a", tmp_path / "b"])) == [("one", 0), ("two", 0)]
    assert len(_read_all({"logDirs": f"{tmp_path / 'a'}, {tmp_path / 'b'}"})) == 1212
    assert len(_read_all({"logDirs": f"{tmp_path / 'a'},{tmp_path / 'b'}", "assign": '{"two":[0]}'})) == 12
    with pytest.raises(FileNotFoundError, match="does not exist"):
        plan_offline(parse_offline_options({"path": str(tmp_path / "c")}))
    with pytest.raises(ValueError, match="no partition directories"):
        plan_offline(parse_offline_options({"path": str(tmp_path)}))
    with pytest.raises(ValueError, match="no partition directory of topic"):
        plan_offline(parse_offline_options({"path": str(tmp_path / "a"), "subscribe": "three"}))
    with pytest.raises(ValueError, match="no topic matching"):
        plan_offline(parse_offline_options({"path": str(tmp_path / "a"), "subscribePattern": "t.*"}))
    with pytest.raises(ValueError, match="no directory for partition"):
        plan_offline(parse_offline_options({"path": str(tmp_path / "a"), "assign": '{"one":[1]}'}))
    with pytest.raises(ValueError, match="in both"):
        plan_offline(parse_offline_options({"logDirs": f"{tmp_path / 'a'},{tmp_path / 'a' / 'one-0'}"}))
    with pytest.raises(ValueError, match=r"kafka\.bootstrap\.servers"):
        parse_offline_options({"path": "x", "kafka.bootstrap.servers": "h:1"})
    with pytest.raises(ValueError, match="read_committed"):
        parse_offline_options({"path": "x", "kafka.isolation.level": "read_committed"})
    with pytest.raises(ValueError, match="offline read"):
        from odradek.spark._options import parse_source_options

        parse_source_options(
            {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "stopAtCorruption": "true"}, streaming=False
        )
    with pytest.raises(ValueError, match="stopAtCorruption"):
        parse_offline_options({"path": "x", "stopAtCorrupton": "true"})
    odd = tmp_path / "odd"
    shutil.copytree(tmp_path / "a" / "one-0", odd)
    with pytest.raises(ValueError, match="not <topic>-<partition>"):
        plan_offline(parse_offline_options({"path": str(odd)}))


def test_a_corrupt_entry_in_the_middle_names_file_and_position(tmp_path: Path) -> None:
    _write_log(tmp_path, batches=120, segment_bytes=6000).shutdown()
    assert len(list((tmp_path / "events-0").glob("*.log"))) >= 3
    seg = sorted((tmp_path / "events-0").glob("*.log"))[0]
    data = bytearray(seg.read_bytes())
    h = list(iter_batch_headers(data))[20]
    struct.pack_into(">i", data, h.position + 8, 0x7FFFFFF0)  # an impossible length
    seg.write_bytes(bytes(data))
    with pytest.raises(SegmentDamageError, match=f"byte position {h.position}.*bad batch length") as err:
        _read_all({"path": str(tmp_path)})
    assert err.value.path == seg and err.value.offset == 80
    # as recovery: nothing after the damage, though later segments are sound (one task per partition)
    stop = {"path": str(tmp_path), "stopAtCorruption": "true", "maxBytesPerPartition": "6000"}
    assert len(plan_offline(parse_offline_options(stop))) == 1
    assert [o for o, _ in _read_all(stop)] == list(range(80))


def test_chunks_share_one_buffer_and_no_row_points_into_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow as pa

    from odradek.spark import _arrow, _offline

    _write_log(tmp_path, batches=200).shutdown()
    part = tmp_path / "events-0"
    expected = _oracle(part)
    for compiled in (_arrow._compiled, None):  # the compiled decoder and the pure-Python one
        monkeypatch.setattr(_arrow, "_compiled", compiled)
        batches = list(read_offline(part, "events", 0, 0, 800, chunk_bytes=4096))  # all kept alive
        assert len(batches) > 5
        got = [
            (o, v)
            for b in batches
            for o, v in zip(b.column("offset").to_pylist(), b.column("value").to_pylist(), strict=True)
        ]
        assert got == expected
    buffer = bytearray(b"x" * 64)
    inside = pa.RecordBatch.from_arrays(
        [
            pa.Array.from_buffers(
                pa.binary(), 1, [None, pa.py_buffer(struct.pack("<ii", 0, 8)), pa.py_buffer(buffer)]
            )
        ],
        names=["value"],
    )
    assert _offline._refers_to(inside, buffer)
    assert not _offline._refers_to(inside, bytearray(64))
