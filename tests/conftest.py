"""Test-wide settings: hypothesis profiles (HYPOTHESIS_PROFILE=ci|dev, default dev) and the order
of tests for the test workers."""

import os
import sys

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=20,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev",
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


# -- installed packages are not assertion-rewritten ---------------------------------------------------
# pytest marks every module of a distribution with a pytest11 entry point (odradek.pytest_plugin,
# anyio, hypothesis, xdist) for assertion rewriting, so a module of one (each codec module of
# protocol/messages/_codecs on the first use of its messages, anyio's backends on httpx's first
# request) was parsed with ast.parse in whichever thread imported it first. CPython 3.11's
# ast.parse is not thread-safe (gh-106905: "SystemError: AST constructor recursion depth
# mismatch" when two threads parse at once): a test whose threads first encoded two kinds of
# message at the same moment failed, and so did an architecture test parsing the package while a
# thread left by an earlier test imported. Installed packages are not test code: their modules are
# imported as Python imports them; only the test tree's own modules are rewritten.
def _packages_not_rewritten() -> None:
    for finder in sys.meta_path:
        marked = getattr(finder, "_must_rewrite", None)
        if isinstance(marked, set):
            for name in [n for n in marked if not n.startswith(("test_", "conftest", "tests"))]:
                marked.discard(name)
            cache = getattr(finder, "_marked_for_rewrite_cache", None)
            if isinstance(cache, dict):
                cache.clear()


_packages_not_rewritten()


# -- the JVMs tests start run C1 only ----------------------------------------------------------------
# Every JVM a test starts (Spark drivers and executors, the standalone master and workers, the Spark
# Connect server, ZooKeeper) lives for seconds to minutes on little data: most of its CPU goes to
# starting up and to the JIT, and with both cores busy (two test workers) C2's compiler threads took
# that CPU from the JVMs themselves.  C1 alone (``-XX:TieredStopAtLevel=1``) starts a local[2]
# session and runs a few small jobs in ~60 % of the wall time.  The tests assert no timing, so
# they check the same behaviour.  JDK_JAVA_OPTIONS is read by the ``java`` launcher only (not
# javac, not gradle's daemon options), which says "NOTE: Picked up JDK_JAVA_OPTIONS" on stderr; a
# value already set is kept.  Benchmarks do not run under pytest and keep the default JIT.
os.environ.setdefault("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")


# -- running on several workers (pytest-xdist, ``-n 4 --dist load --maxschedchunk 2``) -----------------
# Tests go to whichever worker is free, two at a time, so a module's fixtures may start on every worker
# (the Spark tests start one JVM session on each). Grouping by file (``--dist loadgroup`` with an
# ``xdist_group`` mark per file) did nothing here: pytest-xdist 3.8 tags a grouped test by
# rewriting ``Item._nodeid``, which pytest 9.2 no longer reads, so every test was a group of its
# own, handed out a few at a time as a worker ran short. Plain ``--dist load`` (which followed)
# hands each worker a quarter of its share up front, so one worker got all the long tests at
# once; the runs' total time grew from ~25 to ~34 minutes. The longest directories go first so
# that no worker is left with a long tail at the end.
_LONG_FIRST = ("tests/spark/", "tests/cluster/", "tests/security/", "tests/broker/")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid
        return next((i for i, p in enumerate(_LONG_FIRST) if path.startswith(p)), len(_LONG_FIRST))

    items.sort(key=rank)  # stable: keeps the order inside each file
