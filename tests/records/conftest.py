"""Shared set-up for the ``odradek.records`` tests.

Registers the Hypothesis profiles used here: ``records-ci`` (default, bounded so the suite stays
fast on two cores, derandomized so CI is repeatable) and ``records-dev`` (more examples).  Tests
take the one named by ``ODRADEK_TEST_RECORDS_HYPOTHESIS`` (see ``records_helpers``).  kafka-python, the
test oracle, finds snappy through the ``python-snappy`` package installed with the test extras.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "records-ci",
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
)
settings.register_profile(
    "records-dev",
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture
def ts0() -> int:
    return 1_700_000_000_000
