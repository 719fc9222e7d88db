"""``df.write`` / ``df.writeStream`` with ``format("odradek")``, read back with confluent-kafka.

Columns as Spark's Kafka sink takes them: ``value`` (string or binary), ``key``, ``topic``
(the ``topic`` option wins), ``headers`` and ``partition``; a record the broker refuses
fails the task (and the write).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from odradek.testing import BrokerProcess

from .spark_helpers import consume_all, create_topic, produce

pytestmark = pytest.mark.slow


def _writer(df: Any, broker: BrokerProcess, **options: Any) -> Any:
    w = df.write.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
    for k, v in options.items():
        w = w.option(k, v)
    return w


def test_batch_write_every_column_read_back_by_librdkafka(spark: Any, broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 3)
    rows = [
        (
            topic,
            None if i % 5 == 0 else f"key-{i}",
            bytes([i % 256]) * (i % 30) + b"value-%d" % i,
            [("h", b"%d" % i), ("n", None)] if i % 3 == 0 else None,
            i % 3 if i % 2 else None,
        )
        for i in range(200)
    ]
    df = spark.createDataFrame(
        rows, "topic string, key string, value binary, headers array<struct<key: string, value: binary>>, partition int"
    )
    _writer(df.repartition(2), broker).mode("append").save()
    got = consume_all(broker.bootstrap, topic, 200)
    assert len(got) == 200
    by_value = {m.value(): m for m in got}
    for _t, key, value, headers, partition in rows:
        m = by_value[value]
        assert m.key() == (key.encode() if key is not None else None)
        assert (m.headers() or None) == headers
        if partition is not None:
            assert m.partition() == partition
    # null keys spread over partitions; keyed records by murmur2 like the Java client
    assert len({m.partition() for m in got}) == 3


def test_topic_option_overrides_the_topic_column_and_strings_are_utf8(spark: Any, broker: BrokerProcess, topic: str) -> None:
    df = spark.createDataFrame([("elsewhere", "k", "vålue"), ("elsewhere", None, None)], "topic string, key string, value string")
    _writer(df, broker, topic=topic).mode("append").save()
    got = consume_all(broker.bootstrap, topic, 2)
    assert sorted(((m.key(), m.value()) for m in got), key=repr) == [(None, None), (b"k", "vålue".encode())]


@pytest.mark.parametrize(
    ("ddl", "options", "message"),
    [
        ("key string", {"topic": "t"}, "Required attribute 'value' not found"),
        ("value string", {}, "topic option required when no 'topic' attribute is present"),
        ("topic int, value string", {}, "topic attribute unsupported type int"),
        ("value int", {"topic": "t"}, "value attribute unsupported type int"),
        ("key double, value string", {"topic": "t"}, "key attribute unsupported type double"),
        ("value string, partition string", {"topic": "t"}, "partition attribute unsupported type string"),
        ("value string, headers array<string>", {"topic": "t"}, "headers attribute unsupported type"),
    ],
)
def test_invalid_write_schemas_are_rejected(spark: Any, broker: BrokerProcess, ddl: str, options: dict, message: str) -> None:
    df = spark.createDataFrame([], ddl)
    with pytest.raises(Exception, match=message):
        _writer(df, broker, **options).mode("append").save()


def test_overwrite_is_not_allowed(spark: Any, broker: BrokerProcess, topic: str) -> None:
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match=r"Overwrite not allowed for Kafka.*Use \.mode\(\"append\"\)") as info:
        _writer(df, broker, topic=topic).mode("overwrite").save()
    assert "ErrorIfExists (default)" not in str(info.value)  # Spark refuses it for Python data sources


def test_a_record_the_broker_refuses_fails_the_write(spark: Any, broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 1, {"max.message.bytes": "2000"})
    df = spark.createDataFrame([("small",), ("x" * 10_000,)], "value string")
    with pytest.raises(Exception, match=r"MESSAGE_TOO_LARGE|RECORD_LIST_TOO_LARGE|too large"):
        _writer(df.coalesce(1), broker, topic=topic, **{"kafka.retries": "0"}).mode("append").save()


def test_stream_write_from_the_source_read_back_by_librdkafka(
    spark: Any, broker: BrokerProcess, topic: str, tmp_path: Path
) -> None:
    source, sink = f"{topic}-in", f"{topic}-out"
    create_topic(broker.bootstrap, source, 2)
    create_topic(broker.bootstrap, sink, 2)

    def run() -> None:
        q = (
            spark.readStream.format("odradek")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .option("includeHeaders", "true")
            .option("maxOffsetsPerTrigger", "70")
            .load()
            .selectExpr("key", "upper(CAST(value AS STRING)) AS value", "headers")
            .writeStream.format("odradek")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("topic", sink)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        assert q.exception() is None

    produce(broker.bootstrap, source, [{"key": b"k%d" % (i % 7), "value": b"v%d" % i, "headers": [("i", b"%d" % i)]} for i in range(150)])
    run()
    produce(broker.bootstrap, source, [{"key": b"k%d" % (i % 7), "value": b"v%d" % i, "headers": [("i", b"%d" % i)]} for i in range(150, 200)])
    run()
    got = consume_all(broker.bootstrap, sink, 200)
    assert sorted(m.value() for m in got) == sorted(b"V%d" % i for i in range(200))
    assert all(m.headers() == [("i", m.value()[1:])] for m in got)
    # same key, same partition: the Java client's murmur2 partitioner
    for key in {m.key() for m in got}:
        assert len({m.partition() for m in got if m.key() == key}) == 1
