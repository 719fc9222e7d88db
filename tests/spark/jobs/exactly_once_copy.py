"""A driver for the exactly-once kill test: two streaming queries copy topic A, one to B1 with
the exactly-once sink and one to B2 with the default (at-least-once) sink, each with its own
checkpoint.  Mode ``run``: micro-batches back to back until the test SIGKILLs the process
group.  Mode ``drain``: ``availableNow``, then exit 0 (3 if a query failed).

Arguments: bootstrap A B1 B2 checkpoint_dir mode.
"""

import os
import sys

from _restarts import RESTARTS, await_briefly, worker_did_not_start
from pyspark.sql import SparkSession

import odradek.spark

bootstrap, source, exactly_once_sink, default_sink, checkpoints, mode = sys.argv[1:7]
spark = (
    SparkSession.builder.master("local[2]")
    .appName("odradek-exactly-once")
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.driver.host", "127.0.0.1")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
odradek.spark.register(spark)


def start(sink: str, name: str, exactly_once: bool):
    writer = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 150)
        .load()
        .selectExpr("key", "value")
        .writeStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", os.path.join(checkpoints, name))
    )
    if exactly_once:
        # a transaction left open by a killed task is aborted within seconds, not a minute
        writer = writer.option("exactlyOnce", "true").option("kafka.transaction.timeout.ms", "5000")
    if mode == "drain":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="0 seconds")
    return writer.start()


queries = [start(exactly_once_sink, "exactly-once", True), start(default_sink, "default", False)]
print("STARTED", flush=True)
failed = False
for i, (sink, name, exactly_once) in enumerate(((exactly_once_sink, "exactly-once", True), (default_sink, "default", False))):
    for restart in range(RESTARTS + 1):
        q = queries[i]
        await_briefly(q, 600 if mode == "drain" else 3600)
        if restart < RESTARTS and worker_did_not_start(q.exception()):
            print("RESTARTED after:", str(q.exception()).splitlines()[0], flush=True)
            queries[i] = start(sink, name, exactly_once)
            continue
        break
    if q.exception() is not None:
        print("FAILED", str(q.exception())[:3000], flush=True)
        failed = True
print("DONE", flush=True)
spark.stop()
sys.exit(3 if failed else 0)
