"""A failed log dir in a cluster takes only its own partitions offline on its broker, and they come
back on their new leaders: the broker tells the controller (``/log_dir_event_notification``), the
controller learns from the broker's LeaderAndIsr answer which replicas it lost, elects other
in-sync replicas and takes the lost ones out of the ISRs; the partitions in the broker's other dir
keep their leader.  An idempotent ``acks=all`` producer runs throughout and loses nothing.  After
the broker restarts (its disk replaced), its replicas rejoin the ISRs.

The fast in-process cluster (three brokers with two log dirs each); the dir fails through the
broker's failure channel, as an EIO on a write does (the path from a failed write to the channel is
covered by tests/broker/test_logdirs.py).
"""

from __future__ import annotations

import errno
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.testcluster import FastCluster

TOPIC = "disks"
PARTITIONS = 6


def test_a_failed_log_dir_moves_only_its_partitions_and_they_come_back(tmp_path: Path) -> None:
    with FastCluster(tmp_path, 3, log_dirs=2, overrides={"min.insync.replicas": 2}) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)]).values():
            f.result(30)
        cluster.wait_until(lambda: all(len(cluster.isr(TOPIC, p)) == 3 for p in range(PARTITIONS)), 30, "full ISRs")
        acked: list[int] = []
        errors: list[str] = []
        stop = threading.Event()

        def produce() -> None:
            p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                          "enable.idempotence": True, "linger.ms": 5})

            def done(err, msg):  # type: ignore[no-untyped-def]
                if err is None:
                    acked.append(int(msg.value()))
                else:
                    errors.append(str(err))

            n = 0
            while not stop.is_set():
                try:
                    p.produce(TOPIC, str(n).encode(), on_delivery=done)
                    n += 1
                except BufferError:
                    p.poll(0.01)
                if n % 200 == 0:
                    p.poll(0.001)
            p.flush(60)

        writer = threading.Thread(target=produce, daemon=True)
        writer.start()
        try:
            cluster.wait_until(lambda: len(acked) > 500, 30, "records acknowledged")
            victim = cluster.leader(TOPIC, 0)
            broker = cluster.brokers[victim]
            failed_dir = broker.replicas.get(TOPIC, 0).log_dir  # type: ignore[union-attr]
            lost = sorted(p for p in range(PARTITIONS) if broker.replicas.get(TOPIC, p).log_dir == failed_dir)  # type: ignore[union-attr]
            kept = sorted(set(range(PARTITIONS)) - set(lost))
            kept_leaders = {p: cluster.leader(TOPIC, p) for p in kept}

            def fail() -> None:
                broker.replicas.log_dirs.fail(failed_dir, OSError(errno.EIO, "injected: the disk failed"), "a test")

            broker_loop = cluster._ensure_loop()
            broker_loop.call_soon_threadsafe(fail)
            cluster.wait_until(
                lambda: all(cluster.leader(TOPIC, p) not in (victim, -1) and victim not in cluster.isr(TOPIC, p)
                            for p in lost), 30, "the failed dir's partitions led elsewhere, the broker out of their ISRs")
            for p in kept:  # the other dir's partitions: untouched
                assert cluster.leader(TOPIC, p) == kept_leaders[p]
                if victim in cluster.replicas(TOPIC, p):
                    assert victim in cluster.isr(TOPIC, p)
            before = len(acked)
            cluster.wait_until(lambda: len(acked) > before + 500, 30, "records acknowledged after the failure")
            # the disk replaced: the broker restarts and its replicas rejoin
            cluster.stop_broker(victim)
            cluster.start_broker(victim)
            cluster.wait_until(lambda: all(len(cluster.isr(TOPIC, p)) == 3 for p in range(PARTITIONS)), 60,
                               "full ISRs after the restart")
        finally:
            stop.set()
            writer.join(90)
        assert not errors, errors[:5]
        c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "check",
                      "enable.auto.commit": False})
        c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        seen: set[int] = set()
        deadline = time.monotonic() + 60
        while len(seen) < len(set(acked)) and time.monotonic() < deadline:
            seen.update(int(m.value()) for m in c.consume(10000, 0.5) if m.error() is None)
        c.close()
        lost_records = set(acked) - seen
        assert not lost_records, f"{len(lost_records)} acknowledged records lost"
