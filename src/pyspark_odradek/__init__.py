"""Found by PySpark's discovery of Python data sources: ``format("odradek")`` with no set-up.

When a SparkSession first resolves a data source name, PySpark (>= 4.1) runs one Python worker
that imports every top-level module named ``pyspark_*`` and registers the ``DefaultSource``
data source class it finds under its ``name()``.  Installing Odradek (with the ``spark`` extra)
puts this package on the path, so ``spark.read.format("odradek")`` works in any session whose
Python finds it.  ``DefaultSource`` is a front (:mod:`odradek.spark._entry`) that reports a
worker interpreter without Odradek clearly.
"""

from odradek.spark._entry import make_front

DefaultSource = make_front()

__all__ = ["DefaultSource"]
