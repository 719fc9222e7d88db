"""Spark's Python workers import pyspark from its compiled installed files, not from the source zip
Spark puts first on their path (``odradek-spark-python``, :func:`odradek.spark.worker_python`).

From the zip every worker compiled each pyspark module it imported, each time it started: 1.5-2 s
of CPU for a streaming query's source runner on this machine, against 0.55-0.7 s.  Spark waits a
fixed 10 s for a new worker; on the loaded machine of a test run, two streaming queries failed
with "Python worker failed to connect back".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from odradek.spark import worker_python
from odradek.spark._python import without_installed_zips


def _installed(site: Path) -> tuple[str, str]:
    """A pip-installed pyspark and py4j under ``site``; the two zips Spark puts on the path."""
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    (site / "py4j").mkdir()
    for name in ("pyspark.zip", "py4j-0.10.9.9-src.zip"):
        (lib / name).write_bytes(b"")
    return str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")


def test_only_the_zips_of_the_pyspark_installed_beside_the_interpreter_are_dropped(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    pyspark_zip, py4j_zip = _installed(site)
    other = tmp_path / "spark-4.0.0-bin"  # a Spark distribution of its own (its SPARK_HOME)
    other_zip = str(other / "python" / "lib" / "pyspark.zip")
    path = os.pathsep.join([pyspark_zip, py4j_zip, "/opt/app/src", other_zip, "", str(site)])
    assert without_installed_zips(path, [str(site)]).split(os.pathsep) == ["/opt/app/src", other_zip, "", str(site)]
    # not importable from site-packages here (another interpreter's): the zips stay
    assert without_installed_zips(path, [str(tmp_path / "elsewhere")]) == path
    # py4j not installed beside it: nothing to import it from but the zip
    (site / "py4j").rmdir()
    assert without_installed_zips(path, [str(site)]) == path


def test_the_launcher_becomes_this_interpreter_without_the_installed_zips(tmp_path: Path) -> None:
    launcher = worker_python()
    assert launcher != sys.executable, "odradek-spark-python is not installed beside this interpreter"
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    zips = sorted(str(p) for p in lib.glob("*.zip"))
    assert any(z.endswith("pyspark.zip") for z in zips)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*zips, str(tmp_path)])}
    out = subprocess.run(
        [launcher, "-c", "import os, sys, pyspark; print(os.environ['PYTHONPATH']); print(pyspark.__file__); "
         "print(sys.executable); print(sys.argv[1:])", "a", "b"],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    ).stdout.splitlines()
    assert out == [str(tmp_path), pyspark.__file__, sys.executable, "['a', 'b']"]


def test_sparks_python_workers_import_the_compiled_pyspark(spark: Any) -> None:
    """A Python data source's planning (on the driver) and its reads (on the executors) run in
    workers Spark started with the session's ``PYSPARK_PYTHON``: neither imports from the zip."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class WhereFrom(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            import pyspark

            return [InputPartition(pyspark.__file__)]

        def read(self, partition: InputPartition) -> Any:
            import pyspark

            yield (partition.value, pyspark.__file__)

    class WhereFromSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "odradek_test_where_from"

        def schema(self) -> str:
            return "planned string, read string"

        def reader(self, schema: Any) -> DataSourceReader:
            return WhereFrom()

    spark.dataSource.register(WhereFromSource)
    [row] = spark.read.format("odradek_test_where_from").load().collect()
    import pyspark

    assert (row.planned, row.read) == (pyspark.__file__, pyspark.__file__), "a worker imported pyspark from a zip"
    assert os.environ["PYSPARK_PYTHON"] == worker_python()


@pytest.mark.parametrize("python", ["launcher", "plain"])
def test_a_worker_started_as_spark_starts_it_imports_pyspark_compiled(python: str, tmp_path: Path) -> None:
    """The streaming source runner's start as Spark makes it (the zips first on ``PYTHONPATH``):
    through the launcher pyspark comes from the installed package; the plain interpreter (what
    the workers ran before) takes it from the zip, which is what the launcher is for."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sorted(str(p) for p in lib.glob("*.zip")))}
    exe = worker_python() if python == "launcher" else sys.executable
    found = subprocess.run(
        [exe, "-c", "import pyspark.sql.streaming.python_streaming_source_runner as r; print(r.__file__)"],
        env=env, capture_output=True, text=True, timeout=120, check=True,
    ).stdout.strip()
    if python == "launcher":
        assert found.startswith(str(Path(pyspark.__file__).parent)) and ".zip" not in found, found
    else:
        assert "pyspark.zip" in found, found
