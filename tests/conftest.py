"""Test-wide settings: hypothesis profiles (HYPOTHESIS_PROFILE=ci|dev, default dev) and the grouping
of tests for two workers."""

import os

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


# -- running on two workers (pytest-xdist, ``-n 2 --dist loadgroup``) ---------------------------------
# Each test file is one group, so a file's module fixtures start once; the Spark tests form a single
# group because they share one session's JVMs (local[2] and the standalone cluster). The longest
# groups are put first so that neither worker is left with a long tail at the end.
_LONG_FIRST = ("tests/spark/", "tests/cluster/", "tests/security/", "tests/broker/")


def _group_of(item: pytest.Item) -> str:
    path = item.nodeid.split("::", 1)[0]
    return "tests/spark" if path.startswith("tests/spark/") else path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid
        return next((i for i, p in enumerate(_LONG_FIRST) if path.startswith(p)), len(_LONG_FIRST))

    items.sort(key=rank)  # stable: keeps the order inside each file
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_group_of(item)))
