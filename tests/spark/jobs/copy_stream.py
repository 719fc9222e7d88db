"""A streaming job for the standalone-cluster tests, run by ``spark-submit``: copy a topic to
another through the ``odradek`` source and sink (at least once) until a stop file appears.

Arguments: bootstrap source sink checkpoint stop_file fail_on_data_loss.  Prints one JSON line
``RESULT {...}`` (micro-batches, input rows, the query's exception) and exits 0, or 3 when the
query failed.  No register call: PySpark's discovery finds the source.
"""

import json
import os
import sys

from _restarts import RESTARTS, await_briefly, worker_did_not_start
from pyspark.sql import SparkSession

bootstrap, source, sink, checkpoint, stop_file, fail_on_data_loss = sys.argv[1:7]
spark = SparkSession.builder.appName("odradek-copy-stream").getOrCreate()
spark.sparkContext.setLogLevel("WARN")


def start():
    return (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", fail_on_data_loss)
        .option("maxOffsetsPerTrigger", 2000)
        .load()
        .selectExpr("key", "value")
        .writeStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="1 second")
        .start()
    )


query = start()
print("STARTED", flush=True)
progress = []
restarts = 0
for _ in range(3600):  # at most an hour; the test stops it long before
    if os.path.exists(stop_file):
        break
    if not query.isActive:
        if restarts < RESTARTS and worker_did_not_start(query.exception()):
            restarts += 1
            print("RESTARTED after:", str(query.exception()).splitlines()[0], flush=True)
            progress += query.recentProgress
            query = start()
            continue
        break
    await_briefly(query, 1)
error = query.exception()
if query.isActive:
    query.stop()
progress += query.recentProgress
result = {
    "batches": len(progress),
    "rows": sum(p["numInputRows"] for p in progress),
    "exception": None if error is None else str(error)[:3000],
}
print("RESULT " + json.dumps(result), flush=True)
spark.stop()
sys.exit(3 if error is not None else 0)
