"""The class Spark is given for ``format("odradek")``: a thin front that Python workers can
unpickle without Odradek installed, so that a worker on the wrong interpreter says so.

Spark pickles a registered data source class and unpickles it in its Python workers, which run
``PYSPARK_PYTHON`` (set from ``spark.pyspark.python`` by ``spark-submit``; ``python3`` from the
PATH when unset).  Pickled by
reference, :class:`~odradek.spark.source.OdradekDataSource` fails there with a bare
``ModuleNotFoundError: No module named 'odradek'``.  The front is built inside a function, so
cloudpickle pickles it by value; it imports the real source only when Spark calls it, and
turns an import failure into a message naming both interpreters and the setting to change.
"""

from __future__ import annotations

import sys
from typing import Any


def make_front(driver_python: str | None = None) -> type:
    """A ``DataSource`` class named ``odradek`` that delegates to the real one.

    ``driver_python`` is the interpreter known to have Odradek (this one by default)."""
    from pyspark.sql.datasource import DataSource

    has_odradek = driver_python or sys.executable

    class OdradekSource(DataSource):
        """Spark's Kafka source and sink, for Odradek (see :mod:`odradek.spark`)."""

        @classmethod
        def name(cls) -> str:
            return "odradek"

        def _source(self) -> Any:
            try:
                from odradek.spark.source import OdradekDataSource
            except ImportError as exc:
                import sys as worker

                raise ModuleNotFoundError(
                    f"the odradek data source cannot run: Spark's Python worker runs {worker.executable}, "
                    f"which cannot import odradek ({exc}). {has_odradek} has it: set the PYSPARK_PYTHON "
                    "environment variable to it before the SparkSession starts (spark.pyspark.python with "
                    "spark-submit), build the session with odradek.spark.session(), or install "
                    "odradek[spark] into the workers' Python"
                ) from None
            return OdradekDataSource(self.options)

        def schema(self) -> Any:
            return self._source().schema()

        def reader(self, schema: Any) -> Any:
            return self._source().reader(schema)

        def streamReader(self, schema: Any) -> Any:
            return self._source().streamReader(schema)

        def writer(self, schema: Any, overwrite: bool) -> Any:
            return self._source().writer(schema, overwrite)

        def streamWriter(self, schema: Any, overwrite: bool) -> Any:
            return self._source().streamWriter(schema, overwrite)

    return OdradekSource
