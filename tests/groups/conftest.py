"""Fixtures of the consumer-group tests: a real ``odradek serve`` per module (short group timings),
and names unique to each test."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest

from odradek.testing import BrokerProcess
from tests.groups.group_helpers import BROKER_OVERRIDES


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("odradek-groups"), overrides=BROKER_OVERRIDES)
    proc.start()
    try:
        yield proc
    finally:
        code = proc.stop()
        assert code == 0, f"broker exited with {code}:\n{''.join(proc.stderr_lines[-40:])}"


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A topic / group name unique to this test."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:100]
    return f"{base}-{uuid.uuid4().hex[:8]}"
