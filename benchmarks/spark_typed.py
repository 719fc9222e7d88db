"""Benchmark of the ``odradek`` Spark source's typed Avro read against the binary read of the same topic.

Run: ``python benchmarks/spark_typed.py [--records N] [--repeats R]`` (or ``python -m
benchmarks.spark_typed``). Prints one JSON object. Needs pyspark >= 4.2, pyarrow, fastavro,
confluent-kafka and Java 17.

A fresh ``odradek serve`` process with its schema registry gets a 2-partition topic of
``records`` (500,000) Avro values framed the Confluent way: a record of six fields (a long id,
a customer string, a double amount, a timestamp-millis, an enum and a nullable string; ~50
bytes), nine in ten written with the subject's latest schema (version 2) and one in ten with
version 1 (no ``coupon`` field: resolved with its default), produced with confluent-kafka
(``linger.ms=20``, ``batch.size=1 MiB``, uncompressed). One local Spark session (``local[2]``)
then runs, alternately, ``repeats`` times each after ``warmup`` untimed runs:

* ``binary_read`` - ``spark.read.format("odradek")`` over the topic, ``sum(length(value))``;
* ``typed_read`` - the same with ``valueFormat=avro`` (the values decoded in the executors into
  a struct column), ``sum(value.amount)`` and ``count(value.coupon)`` (checked against what was
  produced).

Window: ``collect()`` of the aggregate. Figures are medians; ``ratio`` is typed rows/s over
binary rows/s of this run (target >= 0.6). The machine is a shared 2-core VM: figures move by
10-20 % between runs.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

try:
    from odradek.testing import BrokerProcess
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from odradek.testing import BrokerProcess

TARGET_RATIO = 0.6
PARTITIONS = 2
TOPIC = "bench-typed"
V1 = {"type": "record", "name": "Payment", "namespace": "bench", "fields": [
    {"name": "id", "type": "long"},
    {"name": "customer", "type": "string"},
    {"name": "amount", "type": "double"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "state", "type": {"type": "enum", "name": "State", "symbols": ["NEW", "PAID", "REFUNDED"]}},
]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "coupon", "type": ["null", "string"], "default": None}]}


def register(url: str, schema: dict[str, Any]) -> int:
    import urllib.request

    body = json.dumps({"schema": json.dumps(schema)}).encode()
    req = urllib.request.Request(f"{url}/subjects/{TOPIC}-value/versions", data=body, method="POST",
                                 headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return int(json.loads(resp.read())["id"])


def produce(bootstrap: str, url: str, records: int) -> tuple[float, float, int]:
    """Returns the produce time, the sum of the amounts and the number of coupons."""
    import confluent_kafka as ck
    import fastavro

    from odradek.client import Admin, NewTopic

    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
    ids = {1: register(url, V1), 2: register(url, V2)}
    parsed = {1: fastavro.parse_schema(V1), 2: fastavro.parse_schema(V2)}
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                     "queue.buffering.max.messages": 1_000_000, "compression.type": "none"})
    amount_sum, coupons = 0.0, 0
    states = ["NEW", "PAID", "REFUNDED"]
    t0 = time.perf_counter()
    for i in range(records):
        version = 1 if i % 10 == 0 else 2
        value: dict[str, Any] = {"id": i, "customer": f"customer-{i % 5000}", "amount": (i % 1000) / 4,
                                 "at": 1_700_000_000_000 + i, "state": states[i % 3]}
        if version == 2:
            value["coupon"] = f"c{i % 7}" if i % 4 == 0 else None
            coupons += value["coupon"] is not None
        amount_sum += value["amount"]
        buf = io.BytesIO()
        buf.write(b"\x00" + struct.pack(">I", ids[version]))
        fastavro.schemaless_writer(buf, parsed[version], value)
        while True:
            try:
                p.produce(TOPIC, buf.getvalue(), partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(120) != 0:
        raise RuntimeError("records left unsent")
    return time.perf_counter() - t0, amount_sum, coupons


def timed(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    records = args.records

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from odradek.spark import worker_python

    os.environ["PYSPARK_PYTHON"] = worker_python()  # what odradek.spark.session() gives the workers
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    import pyspark
    from pyspark.sql import SparkSession

    import odradek.spark

    work = Path(tempfile.mkdtemp(prefix="odradek-spark-typed-bench-"))
    broker = BrokerProcess(work / "data", overrides={"num.partitions": PARTITIONS,
                                                     "schema.registry.listeners": "http://127.0.0.1:0"})
    broker.start()
    spark = None
    try:
        url = broker.registry_url
        assert url is not None, "the broker announced no schema registry"
        produce_seconds, amount_sum, coupons = produce(broker.bootstrap, url, records)
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("odradek-typed-benchmark")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.host", "127.0.0.1")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        odradek.spark.register(spark)

        def source(**options: str) -> Any:
            reader = spark.read.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap).option("subscribe", TOPIC)
            for k, v in options.items():
                reader = reader.option(k, v)
            return reader.load()

        binary = source()
        typed = source(valueFormat="avro", **{"schema.registry.url": url})

        def binary_total() -> Any:
            return binary.selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0]

        def typed_total() -> Any:
            return typed.selectExpr("count(*) AS n", "sum(value.amount) AS a", "count(value.coupon) AS c").collect()[0]

        for _ in range(args.warmup):
            b, t = binary_total(), typed_total()
            if b.n != records or t.n != records or abs(t.a - amount_sum) > 1e-6 * max(amount_sum, 1) or t.c != coupons:
                raise RuntimeError(f"wrong result: binary {b}, typed {t} (expected {records} rows, sum {amount_sum}, {coupons} coupons)")
        binary_runs, typed_runs = [], []
        for _ in range(args.repeats):
            binary_runs.append(timed(binary_total)[0])
            typed_runs.append(timed(typed_total)[0])
        binary_t, typed_t = statistics.median(binary_runs), statistics.median(typed_runs)
        result = {
            "benchmark": "spark_typed",
            "provisional": "measured on a shared machine; the lead re-runs on a quiet one",
            "records": records,
            "produce_seconds": round(produce_seconds, 2),
            "binary_read": {"seconds": round(binary_t, 3), "rows_per_s": round(records / binary_t)},
            "typed_read": {"seconds": round(typed_t, 3), "rows_per_s": round(records / typed_t)},
            "ratio": round(binary_t / typed_t, 3),
            "target": TARGET_RATIO,
            "meets_target": binary_t / typed_t >= TARGET_RATIO,
            "runs": {"binary": [round(x, 3) for x in binary_runs], "typed": [round(x, 3) for x in typed_runs]},
            "pyspark": pyspark.__version__,
        }
        print(json.dumps(result, indent=2))
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()


if __name__ == "__main__":
    main()
