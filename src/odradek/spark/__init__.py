"""PySpark data source ``odradek``: Spark's Kafka source and sink, for Odradek.

Same options and columns as Spark's built-in ``format("kafka")``, through the Python Data
Source API (PySpark >= 4.2; install the ``spark`` extra).  Installing it is all the set-up:
PySpark finds the source by itself (the ``pyspark_odradek`` module), in any SparkSession whose
Python workers run an interpreter with Odradek -- the one of an activated virtual environment,
or any, with :func:`session`, which builds a session on this interpreter::

    import odradek.spark
    spark = odradek.spark.session()    # or SparkSession.builder...getOrCreate()

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
``minOffsetsPerTrigger`` with ``maxTriggerDelay`` (default 15m),
``minPartitions``, ``maxRecordsPerPartition``, ``failOnDataLoss`` (default true),
``includeHeaders`` (adds ``headers array<struct<key: string, value: binary>>``),
``kafkaConsumer.pollTimeoutMs`` and ``kafka.*`` client settings (``kafka.isolation.level``,
``kafka.max.partition.fetch.bytes``, ...).  Writer: columns ``value`` (required), ``key``,
``topic`` (or the ``topic`` option, which wins), ``headers``, ``partition``; ``kafka.*``
producer settings (idempotent, acks=all by default).  Batch writes take ``.mode("append")``:
Spark refuses its default mode (ErrorIfExists) for Python data sources, and a topic cannot be
overwritten.  Streaming writes are at least once, or exactly once with ``exactlyOnce=true``
(needs ``topic``, and ``checkpointLocation`` or ``transactionalIdPrefix``): one transaction per
task, committing the micro-batch marker with the rows (:func:`odradek.spark._write.write_batches_exactly_once`).

Typed keys and values (:mod:`odradek.spark._typed`): ``keyFormat`` / ``valueFormat``
(``avro``, ``json``, ``protobuf``; default ``binary``) give the key / value as a struct typed by the latest
schema of the subject ``<topic>-key`` / ``<topic>-value`` in ``schema.registry.url`` (default: the brokers' own,
from their ``schema.registry.listeners``; ``schema.registry.basic.auth.user.info``), records of
older writer schemas resolved to it; ``mode`` ``FAILFAST`` (default) or ``PERMISSIVE`` (null
and ``columnNameOfCorruptRecord``, default ``_corrupt_record``).  The sink encodes struct
``key`` / ``value`` columns with the subject's latest schema, or registers the schema derived
from the struct type with ``autoRegister=true`` (Avro and JSON; not Protobuf yet); Confluent framing.

Offline read (batch only; :mod:`odradek.spark._offline`): ``option("path", DIR)`` (or
``load(DIR)``; ``logDirs`` for several comma-separated data dirs) reads partitions straight from
their segment files -- a broker's data dir, a partition directory, a copy -- with no broker:
``subscribe`` / ``subscribePattern`` / ``assign`` optional (all partitions found otherwise),
the offset and timestamp options as above, ``includeHeaders``, ``failOnDataLoss``,
``minPartitions``, ``maxRecordsPerPartition``, and its own ``readPastRecoveryPoint`` (default
false: "latest" stops at the recovery point the broker checkpointed next to the partition
directories), ``stopAtCorruption`` (default false: a corrupt or truncated segment is an error
naming the file and byte position; true: read up to the last valid batch before it) and
``maxBytesPerPartition`` (default 128 MiB of whole segments per task).

Filter pushdown (batch reads, network and offline; :mod:`odradek.spark._pushdown`): with
``spark.sql.python.filterPushdown.enabled=true`` (:func:`session` sets it; PySpark's default is
off, and the source then reads as before), ``topic``, ``partition`` and ``offset`` predicates
select the partitions and offset ranges read, and ``timestamp`` bounds narrow them through the
time indexes (ListOffsets by timestamp), Spark re-applying them to the rows.

Table + tail (batch only; :mod:`odradek.spark._table_tail`): ``option("source", "table+tail")``
reads a topic written as an Iceberg table (``odradek.iceberg.mode=key_value``) from one snapshot
of the table for what it holds and from the log (read_committed) past the offsets that snapshot
records, as one DataFrame of the same columns, every record once; the catalog from the options
``odradek.iceberg.catalog.type``, ``odradek.iceberg.catalog.uri``, ``odradek.iceberg.warehouse``,
``odradek.iceberg.namespace`` (the broker settings' names), each one not given being the broker's.

Streaming offsets are Spark's Kafka JSON, ``{"topic": {"0": 123}}``; ``Trigger.AvailableNow``
is supported; partitions added while a query runs are read from their beginning; a planned
micro-batch replayed after a restart reads exactly the same offset ranges.  Executors
decode fetched record batches column-wise and hand Spark ``pyarrow.RecordBatch`` objects.

Importing this package does not import pyspark; :func:`register`, :func:`session` and the
``OdradekDataSource`` attribute do.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from odradek.spark.source import OdradekDataSource

__all__ = ["PUSHDOWN_CONF", "PYTHON_WORKER_CONF", "OdradekDataSource", "register", "session", "worker_python"]

#: the Spark setting that lets Python data sources take filters (off by default in PySpark 4.3)
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"

#: how the JVM talks to its Python workers, as :func:`session` sets it: over Unix domain sockets
#: (PySpark >= 4.1; TCP by default).  Over loopback TCP each task of a Python data source waits
#: ~40 ms for the start of its input (Nagle's algorithm against delayed ACKs: the JVM's small
#: writes), the larger part of a task that reads little -- every query over a Python source runs
#: at least one (a read that plans nothing included).
PYTHON_WORKER_CONF = {"spark.python.unix.domain.socket.enabled": "true"}

log = logging.getLogger(__name__)


def register(spark: Any) -> type:
    """Register the ``odradek`` data source with a SparkSession explicitly; returns the class
    Spark was given.  Not needed where PySpark's discovery finds it (see above); it is where a
    session's discovery ran on an interpreter without Odradek."""
    from odradek.spark._entry import make_front

    front = make_front()
    if not _register_with_a_concurrent_env(spark, front):
        spark.dataSource.register(front)
    return front


def _register_with_a_concurrent_env(spark: Any, front: Any) -> bool:
    """Register ``front`` as ``spark.dataSource.register`` does, but with its Python worker
    environment in a ``java.util.concurrent.ConcurrentHashMap``; False if this PySpark does not
    allow it (the caller then registers the usual way).

    PySpark hands every task of a registered Python data source the same map of environment
    variables (``PythonFunction.envVars``), and its runner adds keys to it as tasks start.  In
    local mode, tasks run in the driver's JVM: two first tasks adding keys at once can leave a
    ``java.util.HashMap`` with a wrong size, after which every stage that reads or writes the
    source fails to deserialize (``java.io.OptionalDataException``) for the rest of the session;
    one task adding keys while another query's stage is serialized tears that stage alone."""
    try:
        from pyspark.core.rdd import _prepare_for_python_RDD

        sc = spark.sparkContext
        jvm = sc._jvm
        pickled, broadcast_vars, env, includes = _prepare_for_python_RDD(sc, front)
        func = jvm.SimplePythonFunction(
            bytearray(pickled),
            jvm.java.util.concurrent.ConcurrentHashMap(env),
            includes,
            sc.pythonExec,
            sc.pythonVer,
            broadcast_vars,
            sc._javaAccumulator,
        )
        source = getattr(jvm, "org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource")(func)
        spark._jsparkSession.dataSource().registerPython(front.name(), source)
    except Exception as exc:  # a PySpark without these internals: the usual registration
        log.debug("odradek: registering with a concurrent environment map failed (%s)", exc)
        return False
    return True


def worker_python() -> str:
    """What Spark should start its Python workers with: this interpreter, through the
    ``odradek-spark-python`` launcher installed beside it when there is one (it has the workers
    import pyspark from its compiled installed files rather than from the source zip Spark puts
    first on their path: see :mod:`odradek.spark._python`)."""
    launcher = Path(sys.executable).with_name("odradek-spark-python")
    return str(launcher) if os.access(launcher, os.X_OK) else sys.executable


def session(master: str = "local[*]", app_name: str = "odradek", **conf: Any) -> Any:
    """A SparkSession whose Python workers run this interpreter, with ``odradek`` registered.

    For scripts and notebooks run by a virtual environment's Python without activating it (the
    workers would run ``python3`` from the PATH, which has no Odradek).  Sets ``PYSPARK_PYTHON``
    (to :func:`worker_python`) and ``PYSPARK_DRIVER_PYTHON`` in this process's environment unless
    they are set already;
    ``conf`` items are Spark settings, with ``_`` standing for ``.`` in their names
    (``spark_sql_shuffle_partitions=4``), or pass them as a dict: ``**{"spark.ui.enabled": "false"}``.
    Filter pushdown (``spark.sql.python.filterPushdown.enabled``, off in PySpark's own default) is on,
    and the JVM reaches its Python workers over Unix domain sockets (:data:`PYTHON_WORKER_CONF`),
    unless ``conf`` says otherwise.
    Returns the active session if there is one (as ``getOrCreate`` does), registered."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", worker_python())
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    conf = {PUSHDOWN_CONF: "true", **PYTHON_WORKER_CONF, **conf}
    for key, value in conf.items():
        builder = builder.config(key if "." in key else key.replace("_", "."), str(value))
    spark = builder.getOrCreate()
    register(spark)
    return spark


def __getattr__(name: str) -> Any:
    if name == "OdradekDataSource":
        from odradek.spark.source import OdradekDataSource

        return OdradekDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
