"""``odradek-spark-python``: the interpreter :func:`odradek.spark.session` has Spark start its
Python workers with.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip) first on every Python worker's
``PYTHONPATH``.  A zip of sources holds no bytecode and Python writes none into it, so each worker
compiles every module of pyspark it imports, every time it starts: 1.5-2 s of CPU here for the
streaming source's runner, against 0.55-0.7 s from the installed package's bytecode.  Spark waits
a fixed 10 s for a new worker to connect back; on a loaded machine a query whose worker compiled
for longer failed ("Python worker failed to connect back"), and every streaming query's start
paid the compilation.

This launcher takes from ``PYTHONPATH`` the zips that belong to the pyspark installed beside this
interpreter (``<site-packages>/pyspark/python/lib/*.zip``, with pyspark and py4j importable from
``<site-packages>`` itself: the same files, compiled once) and then becomes the interpreter
(``exec``, same process id), with the arguments Spark gave.  Zips of any other Spark installation
(a ``SPARK_HOME`` of its own) are kept as they are.  It imports nothing beyond ``os`` and ``sys``.
"""

from __future__ import annotations

import os
import sys

__all__ = ["main", "without_installed_zips"]


def without_installed_zips(python_path: str, sys_path: list[str]) -> str:
    """``python_path`` without the zips of the pyspark package that ``sys_path`` (this
    interpreter's own path, site-packages included) would import anyway."""
    kept = []
    for entry in python_path.split(os.pathsep):
        lib, name = os.path.split(os.path.normpath(entry)) if entry else ("", "")
        package = os.path.dirname(os.path.dirname(lib))  # <site>/pyspark from <site>/pyspark/python/lib
        site = os.path.dirname(package)
        installed = (
            name.endswith(".zip")
            and (name == "pyspark.zip" or name.startswith("py4j-"))
            and os.path.basename(package) == "pyspark"
            and lib == os.path.join(package, "python", "lib")
            and site in sys_path
            and os.path.isfile(os.path.join(package, "__init__.py"))
            and os.path.isdir(os.path.join(site, "py4j"))
        )
        if not installed:
            kept.append(entry)
    return os.pathsep.join(kept)


def main() -> None:
    python_path = os.environ.get("PYTHONPATH")
    if python_path:
        path = [os.path.normpath(p) for p in sys.path if p]
        os.environ["PYTHONPATH"] = without_installed_zips(python_path, path)
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])


if __name__ == "__main__":
    main()
