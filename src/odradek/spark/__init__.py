"""PySpark data source ``odradek``: Spark's Kafka source and sink, for Odradek.

Same options and columns as Spark's built-in ``format("kafka")``, through the Python Data
Source API (PySpark >= 4.2; install the ``spark`` extra)::

    import odradek.spark
    odradek.spark.register(spark)

    df = (spark.read.format("odradek")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events")
          .load())                     # key, value, topic, partition, offset, timestamp, timestampType

    query = (spark.readStream.format("odradek")
             .option("kafka.bootstrap.servers", "127.0.0.1:9092")
             .option("subscribePattern", "logs-.*")
             .option("maxOffsetsPerTrigger", 100000)
             .load()
             .selectExpr("CAST(value AS STRING) AS value")
             .writeStream.format("odradek")
             .option("kafka.bootstrap.servers", "127.0.0.1:9092")
             .option("topic", "copy")
             .option("checkpointLocation", "/tmp/ckpt")
             .start())

Reader options: ``kafka.bootstrap.servers`` (or ``bootstrap.servers``), exactly one of
``subscribe`` / ``subscribePattern`` / ``assign``, ``startingOffsets`` / ``endingOffsets``
(``earliest``, ``latest`` or ``{"topic": {"0": 23, "1": -2}}``; -2 earliest, -1 latest),
``startingTimestamp``, ``startingOffsetsByTimestamp``, ``startingOffsetsByTimestampStrategy``,
``endingTimestamp``, ``endingOffsetsByTimestamp``, ``maxOffsetsPerTrigger``,
``minPartitions``, ``maxRecordsPerPartition``, ``failOnDataLoss`` (default true),
``includeHeaders`` (adds ``headers array<struct<key: string, value: binary>>``),
``kafkaConsumer.pollTimeoutMs`` and ``kafka.*`` client settings (``kafka.isolation.level``,
``kafka.max.partition.fetch.bytes``, ...).  Writer: columns ``value`` (required), ``key``,
``topic`` (or the ``topic`` option, which wins), ``headers``, ``partition``; ``kafka.*``
producer settings (idempotent, acks=all by default).

Streaming offsets are Spark's Kafka JSON, ``{"topic": {"0": 123}}``; ``Trigger.AvailableNow``
is supported; partitions added while a query runs are read from their beginning; a planned
micro-batch replayed after a restart reads exactly the same offset ranges.  Executors
decode fetched record batches column-wise and hand Spark ``pyarrow.RecordBatch`` objects.

Importing this package does not import pyspark; :func:`register` and the
``OdradekDataSource`` attribute do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from odradek.spark.source import OdradekDataSource

__all__ = ["OdradekDataSource", "register"]


def register(spark: Any) -> type[OdradekDataSource]:
    """Register the ``odradek`` data source with a SparkSession; returns the class."""
    from odradek.spark.source import OdradekDataSource

    spark.dataSource.register(OdradekDataSource)
    return OdradekDataSource


def __getattr__(name: str) -> Any:
    if name == "OdradekDataSource":
        from odradek.spark.source import OdradekDataSource

        return OdradekDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
