"""Test-wide settings: hypothesis profiles (HYPOTHESIS_PROFILE=ci|dev, default dev) and the order
of tests for two workers."""

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


# -- the package's own modules are not assertion-rewritten ---------------------------------------------
# pytest marks every module of a distribution with a pytest11 entry point (odradek.pytest_plugin)
# for assertion rewriting, so each codec module (protocol/messages/_codecs, imported on the first
# use of its messages) was parsed with ast.parse in whichever thread encoded first. CPython 3.11's
# ast.parse is not thread-safe (gh-106905: "SystemError: AST constructor recursion depth
# mismatch" when two threads parse at once): a test whose threads first encoded two kinds of
# message at the same moment failed, more often on a loaded machine. The package is not test code:
# its modules are imported as Python imports them.
def _package_not_rewritten() -> None:
    for finder in sys.meta_path:
        marked = getattr(finder, "_must_rewrite", None)
        if isinstance(marked, set):
            marked.discard("odradek")
            cache = getattr(finder, "_marked_for_rewrite_cache", None)
            if isinstance(cache, dict):
                cache.clear()


_package_not_rewritten()


# -- running on two workers (pytest-xdist, ``-n 2 --dist load --maxschedchunk 2``) ---------------------
# Tests go to whichever worker is free, two at a time, so a module's fixtures may start on both workers
# (the Spark tests start one JVM session on each). Grouping by file (``--dist loadgroup`` with an
# ``xdist_group`` mark per file) did nothing here: pytest-xdist 3.8 tags a grouped test by
# rewriting ``Item._nodeid``, which pytest 9.2 no longer reads, so every test was a group of its
# own, handed out a few at a time as a worker ran short. Plain ``--dist load`` (which followed)
# hands each worker a quarter of its share up front, so one worker got all the long tests at
# once; the runs' total time grew from ~25 to ~34 minutes. The longest directories go first so
# that neither worker is left with a long tail at the end.
_LONG_FIRST = ("tests/spark/", "tests/cluster/", "tests/security/", "tests/broker/")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid
        return next((i for i, p in enumerate(_LONG_FIRST) if path.startswith(p)), len(_LONG_FIRST))

    items.sort(key=rank)  # stable: keeps the order inside each file
