"""The exactly-once streaming sink (``exactlyOnce=true``): one transaction per task, with the
micro-batch marker committed in it.  The kill test runs a real Spark driver (local[2]) in a
child process group and SIGKILLs it - JVM, executors and Python workers at once - over ten
rounds, restarting each time from the checkpoint."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from odradek.spark import worker_python
from odradek.spark._options import parse_sink_options
from odradek.spark._write import write_batches_exactly_once
from odradek.testing import BrokerProcess

from .spark_helpers import create_topic, produce, wait_for

JOB = Path(__file__).parent / "jobs" / "exactly_once_copy.py"
ROUNDS = 10


def _ends(bootstrap: str, topic: str, isolation: str) -> dict[int, int]:
    from odradek.client import Admin

    with Admin({"bootstrap.servers": bootstrap}) as admin:
        parts = [p.partition for p in admin.describe_topics([topic])[topic].partitions]
        got = admin.list_offsets({(topic, p): "latest" for p in parts}, isolation_level=isolation, timeout=10)
    return {tp[1]: info.offset for tp, info in got.items()}


def _values(bootstrap: str, topic: str, isolation: str) -> Counter[bytes]:
    """Every value of ``topic`` (confluent-kafka at ``isolation``), once no transaction is open
    on it: read until each partition reports its end (librdkafka's position stops before a
    trailing marker, so it cannot say where the end is)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    ends = wait_for(
        lambda: (lambda c, u: u if c == u else None)(
            _ends(bootstrap, topic, "read_committed"), _ends(bootstrap, topic, "read_uncommitted")
        ),
        60,
        f"no open transaction on {topic}",
    )
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"check-{uuid.uuid4().hex[:6]}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": isolation,
    })
    c.assign([TopicPartition(topic, p, 0) for p in ends])
    seen: Counter[bytes] = Counter()
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while at_end != set(ends):
            assert time.monotonic() < deadline, f"{topic}: no end of partitions {set(ends) - at_end} within 60 s"
            for msg in c.consume(1000, 0.2):
                if msg.error() is not None:
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                    at_end.add(msg.partition())
                    continue
                at_end.discard(msg.partition())
                seen[msg.value()] += 1
    finally:
        c.close()
    return seen


def test_exactly_once_options() -> None:
    base = {"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "out"}
    assert not parse_sink_options(base).exactly_once
    with pytest.raises(ValueError, match="'topic' option"):
        parse_sink_options({"kafka.bootstrap.servers": "x:1", "exactlyOnce": "true", "checkpointLocation": "/c"})
    with pytest.raises(ValueError, match="transactionalIdPrefix"):
        parse_sink_options({**base, "exactlyOnce": "true", "kafka.transactional.id": "t"})
    with pytest.raises(ValueError, match="needs exactlyOnce"):
        parse_sink_options({**base, "transactionalIdPrefix": "p"})
    with pytest.raises(ValueError, match="checkpointLocation"):
        parse_sink_options({**base, "exactlyOnce": "true"})
    with pytest.raises(ValueError, match="true or false"):
        parse_sink_options({**base, "exactlyOnce": "yes"})
    a = parse_sink_options({**base, "exactlyOnce": "true", "checkpointLocation": "/ck/a"})
    b = parse_sink_options({**base, "exactlyOnce": "TRUE", "checkpointLocation": "/ck/b"})
    again = parse_sink_options({**base, "exactlyOnce": "true", "checkpointLocation": "/ck/a"})
    assert a.exactly_once and a.transactional_id_prefix == again.transactional_id_prefix
    assert a.transactional_id_prefix != b.transactional_id_prefix  # one prefix per query
    given = parse_sink_options({**base, "exactlyOnce": "true", "transactionalIdPrefix": "copy-job"})
    assert given.transactional_id_prefix == "copy-job"


def _batch(values: list[bytes]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"key": pa.array([None] * len(values), pa.binary()), "value": pa.array(values, pa.binary())})


def test_a_partition_of_a_batch_is_committed_once(broker: BrokerProcess) -> None:
    out = f"eo-unit-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, out, 2)
    config = {"bootstrap.servers": broker.bootstrap}
    first = [b"a-%03d" % i for i in range(50)]
    assert write_batches_exactly_once(iter([_batch(first)]), config, out, "unit", 0, 0) == 50
    # the same batch and partition again (a retried task, a re-run batch): nothing written
    assert write_batches_exactly_once(iter([_batch(first)]), config, out, "unit", 0, 0) is None
    # another partition of the same batch has its own marker
    second = [b"b-%03d" % i for i in range(20)]
    assert write_batches_exactly_once(iter([_batch(second)]), config, out, "unit", 0, 1) == 20

    # an attempt that dies after sending part of its rows leaves nothing visible
    third = [b"c-%03d" % i for i in range(30)]

    def dying() -> Any:
        yield _batch(third[:15])
        raise RuntimeError("the task died")

    with pytest.raises(RuntimeError, match="the task died"):
        write_batches_exactly_once(dying(), config, out, "unit", 1, 0)
    assert write_batches_exactly_once(iter([_batch(third)]), config, out, "unit", 1, 0) == 30

    committed = _values(broker.bootstrap, out, "read_committed")
    assert committed == Counter(first + second + third)
    uncommitted = _values(broker.bootstrap, out, "read_uncommitted")
    # the dead attempt's rows were aborted: dropped unsent, or in the log and hidden
    assert 100 <= sum(uncommitted.values()) <= 115 and set(uncommitted) == set(committed)


def _committed_input(checkpoint: Path, source: str) -> int:
    """How many input records the query's committed micro-batches covered (it starts at 0)."""
    commits = [int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")] if (checkpoint / "commits").exists() else []
    if not commits:
        return 0
    lines = (checkpoint / "offsets" / str(max(commits))).read_text().splitlines()
    offsets = json.loads(lines[-1])
    return sum(int(v) for v in offsets[source].values())


@pytest.mark.slow
def test_killed_drivers_copy_each_record_exactly_once(broker: BrokerProcess, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    source, exact, default = f"eo-a-{tag}", f"eo-b1-{tag}", f"eo-b2-{tag}"
    for t in (source, exact, default):
        create_topic(broker.bootstrap, t, 3)
    values = [b"rec-%05d" % i for i in range(3000)]
    produce(broker.bootstrap, source, ({"value": v, "partition": i % 3} for i, v in enumerate(values)))
    checkpoints = tmp_path / "checkpoints"
    env = {**os.environ, "PYSPARK_PYTHON": worker_python(), "PYSPARK_DRIVER_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1"}
    rng = random.Random(7)
    log_path = tmp_path / "driver.log"

    def start(mode: str) -> subprocess.Popen[bytes]:
        with log_path.open("ab") as log:
            return subprocess.Popen(
                [sys.executable, str(JOB), broker.bootstrap, source, exact, default, str(checkpoints), mode],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )

    def log_text() -> str:
        return log_path.read_text(errors="replace") if log_path.exists() else ""

    def failure() -> str:
        """The drivers' errors for a failure message: the start of each failed query's exception
        (the job prints it after FAILED) and of each Java cause, then the log's tail."""
        text = log_text()
        heads = [line[:1500] for line in text.splitlines() if line.startswith(("FAILED", "Caused by"))]
        return "\n".join([*heads[:8], "--- log tail:", text[-2500:]])

    def started(driver: subprocess.Popen[bytes], before: int) -> bool:
        return log_text().count("STARTED") > before or driver.poll() is not None

    kills = []
    for round_ in range(ROUNDS):
        before = log_text().count("STARTED")
        driver = start("run")
        try:
            wait_for(lambda d=driver, b=before: started(d, b), 120, "the queries started")
            assert driver.poll() is None, failure()
            if round_ % 2 == 0:
                # while the default sink's batch is written but not yet committed by Spark: the
                # moment a restart replays it
                def mid_write() -> bool:
                    return sum(_ends(broker.bootstrap, default, "read_uncommitted").values()) > _committed_input(
                        checkpoints / "default", source
                    )

                wait_for(mid_write, 90, "a default-sink batch written but not committed")
                how = "mid-write"
            else:
                time.sleep(rng.uniform(0.5, 4.0))
                how = "random"
        finally:
            os.killpg(driver.pid, signal.SIGKILL)  # driver, JVM, executor threads, Python workers
            driver.wait(30)
        kills.append(how)
    drain = start("drain")
    try:
        assert drain.wait(300) == 0, failure()
    finally:
        if drain.poll() is None:
            os.killpg(drain.pid, signal.SIGKILL)
            drain.wait(30)

    # transactions left open by the last kill end by their timeout: wait for the stable end
    wait_for(lambda: _ends(broker.bootstrap, exact, "read_committed") == _ends(broker.bootstrap, exact, "read_uncommitted"),
             60, "no open transaction on the exactly-once output")
    exact_seen = _values(broker.bootstrap, exact, "read_committed")
    default_seen = _values(broker.bootstrap, default, "read_uncommitted")
    duplicates = {"exactly_once": sum(n - 1 for n in exact_seen.values()),
                  "default": sum(n - 1 for n in default_seen.values())}
    print(json.dumps({"kills": kills, "duplicates": duplicates,
                      "exactly_once_log_records": sum(_ends(broker.bootstrap, exact, "read_uncommitted").values())}))
    assert set(exact_seen) == set(values) and duplicates["exactly_once"] == 0
    assert set(default_seen) == set(values)
    assert duplicates["default"] > 0  # at least once: the replayed batches are there twice
