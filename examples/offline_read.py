"""Read a topic's partitions from a copy of their segment files with Spark: no broker involved.

    .venv/bin/python examples/offline_read.py DATA_DIR TOPIC [COPY_DIR]

Copies every ``TOPIC-<partition>`` directory of the data dir ``DATA_DIR`` (a broker's
``log.dirs``, e.g. ``odradek-data``) into ``COPY_DIR`` (a new temporary directory by default),
then reads the copy with ``spark.read.format("odradek").option("path", COPY_DIR)`` and prints the
number of records and the latest timestamp per partition, and the first records.  The copy may
be taken while the broker writes: a batch being appended at that moment may be cut short in the
copy, and the read stops before it (``stopAtCorruption=true``, with a warning naming the file and
the byte position) instead of failing.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import odradek.spark


def main() -> None:
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    data_dir, topic = Path(sys.argv[1]), sys.argv[2]
    copy = Path(sys.argv[3]) if len(sys.argv) == 4 else Path(tempfile.mkdtemp(prefix=f"{topic}-copy-"))
    partitions = sorted(
        p for p in data_dir.glob(f"{topic}-*") if p.is_dir() and p.name[len(topic) + 1 :].isdigit()
    )
    if not partitions:
        sys.exit(f"no partition directory of topic {topic!r} in {data_dir}")
    for part in partitions:
        shutil.copytree(part, copy / part.name, dirs_exist_ok=True)
    print(f"copied {len(partitions)} partition(s) of {topic} to {copy}")

    spark = odradek.spark.session("local[2]", "offline-read", spark_ui_enabled="false")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        df = spark.read.format("odradek").option("path", str(copy)).option("stopAtCorruption", "true").load()
        df.groupBy("partition").agg({"offset": "count", "timestamp": "max"}).withColumnRenamed(
            "count(offset)", "records"
        ).orderBy("partition").show()
        df.selectExpr(
            "partition", "offset", "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value"
        ).orderBy("partition", "offset").show(10, truncate=60)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
