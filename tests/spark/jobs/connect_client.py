"""A Spark Connect client for the tests of remote sessions: a thin PySpark session
(``SparkSession.builder.remote``) in a process of its own, as a notebook or a remote job would
have, using ``format("odradek")`` exactly as a local session does (no register call: the server's
PySpark discovery finds the source).  Odradek is made unimportable here, as on a machine that has
only ``pyspark[connect]``.

Arguments: the server's ``sc://`` URL, a scenario, and its arguments as one JSON object.  Prints
one line ``RESULT {...}`` and exits 0; an error raised by Spark is reported in the result
(``error``: its class and message) so the test can check what a remote user is told.
"""

import json
import sys

# a thin client has no Odradek: importing it here fails (the source runs on the server)
sys.modules["odradek"] = None  # type: ignore[assignment]
sys.modules["pyspark_odradek"] = None  # type: ignore[assignment]

from pyspark.sql import SparkSession  # noqa: E402


def read(spark, a):
    df = (
        spark.read.format("odradek")
        .option("kafka.bootstrap.servers", a["bootstrap"])
        .option(a.get("option", "subscribe"), a["topic"])
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .load()
    )
    rows = df.selectExpr("partition", "offset", "key", "value", "headers", "topic").collect()
    return {
        "columns": df.columns,
        "rows": [
            {
                "topic": r["topic"],
                "partition": r["partition"],
                "offset": r["offset"],
                "key": None if r["key"] is None else bytes(r["key"]).decode(),
                "value": None if r["value"] is None else bytes(r["value"]).decode(),
                "headers": [[h["key"], bytes(h["value"]).decode()] for h in (r["headers"] or [])],
            }
            for r in rows
        ],
    }


def write(spark, a):
    df = spark.range(a["count"]).selectExpr(
        "CAST(id % 5 AS STRING) AS key",
        "CONCAT('remote-', CAST(id AS STRING)) AS value",
        "ARRAY(NAMED_STRUCT('key', 'origin', 'value', CAST('connect' AS BINARY))) AS headers",
    )
    (df.write.format("odradek").option("kafka.bootstrap.servers", a["bootstrap"]).option("topic", a["topic"])
       .mode("append").save())
    return {"written": a["count"]}


def stream(spark, a):
    source = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", a["bootstrap"])
        .option("subscribe", a["source"])
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", a.get("maxOffsetsPerTrigger", 100))
        .load()
        .selectExpr("key", "value")
    )
    writer = (
        source.writeStream.format("odradek")
        .option("kafka.bootstrap.servers", a["bootstrap"])
        .option("topic", a["sink"])
        .option("checkpointLocation", a["checkpoint"])
    )
    if a.get("exactlyOnce"):
        writer = writer.option("exactlyOnce", "true").option("kafka.transaction.timeout.ms", "5000")
    query = writer.start()
    try:
        query.processAllAvailable()
        progress = query.recentProgress
    finally:
        query.stop()
    rows = [p.numInputRows for p in progress]  # StreamingQueryProgress objects in a remote session
    return {"batches": len(progress), "rows": sum(rows)}


SCENARIOS = {"read": read, "write": write, "stream": stream}

url, scenario, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
spark = SparkSession.builder.remote(url).getOrCreate()
try:
    try:
        result = SCENARIOS[scenario](spark, args)
    except Exception as exc:  # reported to the test, which checks what the user is told
        result = {"error": f"{type(exc).__name__}: {exc}"}
    print("RESULT " + json.dumps(result), flush=True)
finally:
    spark.stop()
