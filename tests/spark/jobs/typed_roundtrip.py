"""A job for the standalone-cluster test of typed columns, run by ``spark-submit``: read a topic
of registry-framed Avro as a struct column (batch and streaming), write the rows to another
topic with ``autoRegister``, and read that back.

Arguments: bootstrap registry_url source sink checkpoint.  Prints one JSON line ``RESULT {...}``
(the values of each read, as dicts) and exits 0.
"""

import json
import sys

from pyspark.sql import SparkSession

bootstrap, registry, source, sink, checkpoint = sys.argv[1:6]
spark = SparkSession.builder.appName("odradek-typed-roundtrip").getOrCreate()
spark.sparkContext.setLogLevel("WARN")


def read(topic):
    return (
        spark.read.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("schema.registry.url", registry)
        .option("valueFormat", "avro")
        .load()
    )


def values(df):
    return [r.value.asDict(recursive=True) for r in df.select("value").collect()]


batch = read(source)
(
    batch.select("key", "value").write.format("odradek")
    .option("kafka.bootstrap.servers", bootstrap)
    .option("topic", sink)
    .option("schema.registry.url", registry)
    .option("valueFormat", "avro")
    .option("autoRegister", "true")
    .mode("append").save()
)
query = (
    spark.readStream.format("odradek")
    .option("kafka.bootstrap.servers", bootstrap)
    .option("subscribe", source)
    .option("startingOffsets", "earliest")
    .option("schema.registry.url", registry)
    .option("valueFormat", "avro")
    .load()
    .select("value")
    .writeStream.format("memory").queryName("typed_stream")
    .option("checkpointLocation", checkpoint)
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination(600)
error = query.exception()
result = {
    "batch": values(batch),
    "copy": values(read(sink)),
    "stream": values(spark.table("typed_stream")),
    "exception": None if error is None else str(error)[:3000],
}
print("RESULT " + json.dumps(result), flush=True)
spark.stop()
