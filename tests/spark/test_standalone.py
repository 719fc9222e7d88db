"""The ``odradek`` source and sink on a Spark standalone cluster, against a 3-broker Odradek cluster.

Spark: a master and two one-core workers (separate JVMs; executors in processes of their own,
started by the workers), the job submitted with ``spark-submit`` in client mode.  Odradek: three
``odradek serve --zookeeper`` brokers on Debian's ZooKeeper, topics of 3 partitions replicated
3 times with ``min.insync.replicas=2``.  A streaming copy job runs while records are produced;
the leader of a source partition is SIGKILLed mid-query and restarted.  The query recovers, and
the sink topic holds every acknowledged input record (at least once: after dedup by key, exactly
once; duplicates are allowed, losses and strangers are not).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.coordination.zkserver import ZooKeeperServer
from odradek.testing import wait_for

from .standalone import SparkStandalone, spark_submit

pytestmark = pytest.mark.slow

JOBS = Path(__file__).resolve().parent / "jobs"
#: the producer stops by itself after this many records (~17 min at its rate): a bound, not a size
RECORD_LIMIT = 100_000


@pytest.fixture
def odradek_cluster(tmp_path: Path) -> Iterator[Any]:
    from tests.cluster.conftest import Cluster, require_zookeeper

    require_zookeeper()
    zk = ZooKeeperServer(tmp_path / "zk")
    zk.start()
    cluster = Cluster(
        zk,
        tmp_path / "brokers",
        3,
        overrides={
            "default.replication.factor": 3,
            "min.insync.replicas": 2,
            "offsets.topic.replication.factor": 3,
            "replica.lag.time.max.ms": 10000,
            "zookeeper.session.timeout.ms": 6000,
        },
    )
    try:
        cluster.start_all()
        cluster.wait_for_controller()
        yield cluster
    finally:
        cluster.close()
        zk.stop()


def _create(bootstrap: str, *topics: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, 3, 3) for t in topics]).values():
        f.result(30)


def _keys(bootstrap: str, topic: str) -> Counter[bytes]:
    """How many times each key is in ``topic`` (every partition, up to its end now)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[1] for p in range(3)}
        c.assign([TopicPartition(topic, p, 0) for p in range(3)])
        position = dict.fromkeys(range(3), 0)
        seen: Counter[bytes] = Counter()
        deadline = time.monotonic() + 60
        while any(position[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for m in c.consume(1000, 0.2):
                if m.error() is None:
                    seen[m.key()] += 1
                    position[m.partition()] = m.offset() + 1
        return seen
    finally:
        c.close()


class _Producer(threading.Thread):
    """Produces keys ``k00000``.. at ~``rate`` records/s with acks=all and idempotence until
    :meth:`stop` (or ``limit`` records); records what the brokers acknowledged.

    It runs until told, not for a fixed count: on a loaded machine the query may take longer to
    copy its first records than a fixed count takes to send, and the broker must die mid-stream."""

    def __init__(self, bootstrap: str, topic: str, rate: float, limit: int = RECORD_LIMIT) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.rate, self.limit = bootstrap, topic, rate, limit
        self.sent = 0
        self._halt = threading.Event()
        self.acked: set[bytes] = set()
        self.failed: list[str] = []

    def run(self) -> None:
        from confluent_kafka import Producer

        p = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 120000,
            }
        )

        def done(err: Any, msg: Any) -> None:
            if err is None:
                self.acked.add(msg.key())
            else:
                self.failed.append(str(err))

        start = time.monotonic()
        for i in range(self.limit):
            while time.monotonic() - start < i / self.rate and not self._halt.is_set():
                p.poll(0.005)
            if self._halt.is_set():
                break
            key = b"k%06d" % i
            p.produce(self.topic, key=key, value=b"value of " + key, on_delivery=done)
            self.sent += 1
            p.poll(0)
        p.flush(150)

    def stop(self) -> None:
        self._halt.set()


def test_a_streaming_copy_survives_a_broker_sigkill_on_a_standalone_cluster(
    spark_standalone: SparkStandalone, odradek_cluster: Any, tmp_path: Path
) -> None:
    cluster = odradek_cluster
    source, sink = "events-in", "events-out"
    _create(cluster.bootstrap, source, sink)
    stop_file = tmp_path / "stop"
    log = tmp_path / "driver.log"
    args = [cluster.bootstrap, source, sink, str(tmp_path / "checkpoint"), str(stop_file), "true"]
    driver = spark_submit(spark_standalone.url, JOBS / "copy_stream.py", args, log, conf={"spark.cores.max": "2"})
    producer = _Producer(cluster.bootstrap, source, rate=100.0)
    try:
        wait_for(lambda: "STARTED" in log.read_text(errors="replace") or driver.poll() is not None, 180, "the query started", 0.5)
        assert driver.poll() is None, log.read_text(errors="replace")[-4000:]
        producer.start()
        # mid-query: once some records went through, SIGKILL the leader of source partition 0
        wait_for(lambda: sum(_keys(cluster.bootstrap, sink).values()) >= 300, 120, "300 records copied", 1.0)
        victim = cluster.leader(source, 0)
        assert victim is not None
        cluster.kill(victim)
        killed_at = producer.sent
        wait_for(lambda: cluster.leader(source, 0) not in (None, victim), 60, "a new leader of partition 0")
        time.sleep(5)  # the query runs on with one broker down
        cluster.restart(victim)
        # records sent after the restart are acknowledged too, then the producer stops
        restarted_at = producer.sent
        wait_for(lambda: len(producer.acked) > restarted_at, 120, "a record sent after the restart acknowledged", 0.5)
        producer.stop()
        producer.join(200)
        assert not producer.is_alive()
        assert not producer.failed, producer.failed[:5]
        assert len(producer.acked) == producer.sent
        assert 0 < killed_at < restarted_at < producer.sent < producer.limit

        def copied() -> Counter[bytes] | None:
            seen = _keys(cluster.bootstrap, sink)
            return seen if producer.acked <= set(seen) else None

        seen = wait_for(copied, 180, "every acknowledged record copied to the sink", 2.0)
        assert driver.poll() is None, "the query ended by itself: " + log.read_text(errors="replace")[-4000:]
    finally:
        stop_file.touch()
        try:
            driver.wait(120)
        except Exception:
            driver.kill()
            driver.wait(10)
    text = log.read_text(errors="replace")
    result = json.loads(text.split("RESULT ", 1)[1].splitlines()[0])
    assert driver.returncode == 0 and result["exception"] is None, text[-4000:]
    assert set(seen) == producer.acked  # nothing lost, nothing that was not produced
    duplicates = sum(n - 1 for n in seen.values())
    print(json.dumps({"acked": len(producer.acked), "copied": sum(seen.values()), "duplicates": duplicates, **result}))
    assert duplicates < producer.sent  # at least once: a replayed batch at most, never the whole stream twice
    # the executors ran in the workers' processes, one application directory on each worker
    apps = [sorted(p.name for p in (spark_standalone.base_dir / f"work-{i}").glob("app-*")) for i in range(2)]
    assert all(apps), apps
