"""Interop fixtures: one real ``odradek serve`` process per test module, unique topics per test.

The broker runs as a separate process on 127.0.0.1 with an ephemeral port, exactly as users
start it; the clients under test (confluent-kafka, kcat, kafka-python, aiokafka) talk to it over
loopback.  Each test gets its own topic name, so tests in one module share the broker safely.
"""

from __future__ import annotations

import re
import shutil
import uuid
from collections.abc import Iterator

import pytest

from odradek.testing import BrokerProcess

# Stated explicitly (they are also the defaults) because the tests depend on them: one partition
# for auto-created topics, auto-creation on, topic deletion on.
BROKER_OVERRIDES: dict[str, object] = {
    "num.partitions": 1,
    "auto.create.topics.enable": "true",
    "delete.topic.enable": "true",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data_dir = tmp_path_factory.mktemp("odradek-interop")
    proc = BrokerProcess(data_dir, overrides=BROKER_OVERRIDES)
    proc.start()
    try:
        yield proc
    finally:
        code = proc.stop()
        # A clean SIGTERM shutdown must exit 0; anything else is a broker bug worth seeing.
        assert code == 0, f"broker exited with {code}:\n{''.join(proc.stderr_lines[-40:])}"


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name unique to this test (the topic itself is created by the test or on demand)."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:150]
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def kcat() -> str:
    """Path of kcat; a required dependency, so its absence fails the tests instead of skipping them."""
    path = shutil.which("kcat")
    if path is None:
        pytest.fail("kcat is not installed: the interop suite needs it (apt-get install kcat)")
    return path
