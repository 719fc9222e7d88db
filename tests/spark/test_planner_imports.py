"""What Spark's planner workers import to plan a network read (no Spark needed).

Each planner worker (create data source, pushdown / plan) imports :mod:`odradek.spark.source` once
per process, and Spark forks them again after a minute without queries: the executors' fetch and
decode path, the offline read, table + tail, the sink, the schema registry's HTTP client and pandas
(which ``pyarrow.array`` of a Python list imports) are left to where they are used.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

_PLAN = """
import json, sys
from odradek.spark.source import OdradekDataSource
ds = OdradekDataSource({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"})
reader = ds.reader(ds.schema())
print(json.dumps(sorted(sys.modules)))
"""

#: not needed to plan a network read
_LEFT_OUT = (
    "pandas",
    "urllib.request",
    "odradek.spark._fetch",
    "odradek.spark._offline",
    "odradek.spark._table_tail",
    "odradek.spark._write",
)


def test_planning_a_read_imports_neither_the_read_path_nor_pandas() -> None:
    out = subprocess.run([sys.executable, "-c", _PLAN], capture_output=True, text=True, timeout=120, check=True)
    loaded = set(json.loads(out.stdout.splitlines()[-1]))
    assert "odradek.spark.source" in loaded
    assert sorted(m for m in _LEFT_OUT if m in loaded) == []
