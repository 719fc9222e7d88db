"""A broker SIGKILLed while a client produces with acks=all keeps every acknowledged record."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from odradek.testing import BrokerProcess


def _consume_all(bootstrap: str, topic: str, partitions: int, expect: int, timeout: float = 30) -> dict[tuple[int, int], bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[tuple[int, int], bytes] = {}
    deadline = time.monotonic() + timeout
    idle_since = time.monotonic()
    while time.monotonic() < deadline:
        m = c.poll(0.3)
        if m is None:
            if len(got) >= expect and time.monotonic() - idle_since > 1.5:
                break
            continue
        if m.error():
            assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
            continue
        idle_since = time.monotonic()
        key = (m.partition(), m.offset())
        assert key not in got, f"offset {key} delivered twice"
        got[key] = m.value()
    c.close()
    return got


def test_sigkill_during_acks_all_produce_loses_no_acknowledged_record(tmp_path: Path) -> None:
    data = tmp_path / "data"
    overrides = {"log.flush.interval.messages": 1, "num.partitions": 2, "log.segment.bytes": 200_000}
    broker = BrokerProcess(data, overrides=overrides).start()
    acked: dict[tuple[int, int], bytes] = {}
    failed: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        p = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 1,
                "message.timeout.ms": 5000,
                "reconnect.backoff.max.ms": 200,
            }
        )

        def done(err: object, msg: object) -> None:
            if err is None:
                acked[(msg.partition(), msg.offset())] = msg.value()  # type: ignore[attr-defined]
            else:
                failed.append(str(err))

        i = 0
        while not stop.is_set():
            p.produce("durable", key=str(i % 17).encode(), value=f"value-{i}".encode() * 3, on_delivery=done)
            p.poll(0)
            i += 1
            if i % 50 == 0:
                time.sleep(0.001)
        p.flush(10)

    t = threading.Thread(target=produce)
    t.start()
    deadline = time.monotonic() + 30
    while len(acked) < 3000 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(acked) >= 3000, f"only {len(acked)} records acknowledged"
    broker.kill()  # SIGKILL while the producer is still sending
    stop.set()
    t.join(30)
    snapshot = dict(acked)

    restarted = BrokerProcess(data, overrides=overrides).start()
    try:
        got = _consume_all(restarted.bootstrap, "durable", 2, len(snapshot))
    finally:
        restarted.stop()
    missing = {k: v for k, v in snapshot.items() if got.get(k) != v}
    assert not missing, f"{len(missing)} acknowledged records lost or changed, e.g. {list(missing.items())[:3]}"
    for p in (0, 1):
        offsets = sorted(o for (part, o) in got if part == p)
        assert offsets == list(range(len(offsets))), "offsets have gaps or duplicates"
