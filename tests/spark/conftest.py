"""Spark fixtures: one local Spark session and one ``odradek serve`` process for all Spark tests.

Starting Spark takes ~15 s, so the session is shared (session scope): ``local[2]``, two shuffle
partitions, no UI, the driver and its Python workers on this interpreter, UTC session time
zone, and the ``odradek`` data source registered.  Java 17 must be installed (it is a real
dependency, like ZooKeeper for the cluster tests: its absence fails the tests).  Each test uses
topics of its own on the shared broker.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from odradek.spark import worker_python
from odradek.testing import BrokerProcess

BROKER_OVERRIDES: dict[str, object] = {
    "num.partitions": 2,
    "auto.create.topics.enable": "true",
    "group.initial.rebalance.delay.ms": 0,
}


def _java_available() -> bool:
    home = os.environ.get("JAVA_HOME")
    return shutil.which("java") is not None or bool(home and os.path.exists(os.path.join(home, "bin", "java")))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    if not _java_available():
        pytest.fail("Java is not installed: the Spark tests need a JDK (17) for pyspark")
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = worker_python()  # this interpreter, without compiling pyspark each start
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import odradek.spark

    session = (
        SparkSession.builder.master("local[2]")
        .appName("odradek-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.pollingDelay", "50ms")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    odradek.spark.register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("odradek-spark"), overrides=BROKER_OVERRIDES)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name unique to this test."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:100]
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Spark standalone cluster (a master and two one-core workers, separate JVMs on 127.0.0.1),
    started when a test first asks for it and stopped by PID at the end of the session."""
    pytest.importorskip("pyspark")
    if not _java_available():
        pytest.fail("Java is not installed: the Spark tests need a JDK (17) for pyspark")
    from .standalone import SparkStandalone

    cluster = SparkStandalone(tmp_path_factory.mktemp("spark-standalone"), workers=2, cores=1, memory="1g")
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
