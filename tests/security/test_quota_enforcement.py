"""Client quotas enforced on real clients: a confluent-kafka producer authenticated as alice (SASL
PLAIN) with ``producer_byte_rate`` = 1 MiB/s is held to it, told to back off (throttle_time_ms),
loses nothing; bob on the same broker is not slowed; a changed quota applies without a restart.

The broker runs Kafka's sampled rate with ``quota.window.num=2`` windows of 1 s (the default 11
is accepted too, but a greedy producer's first burst then echoes every 11 s — each burst lands in
one sample and leaves as one — so a 20 s measurement of it swings between about 0.6 and 1.1 of
the quota; with 2 windows of 1 s the echo repeats about every 2 s, ten times within the measurement).

What is asserted is what the issue demands and what holds on a loaded 2-core machine: alice's rate
over 20 s once the first window set has passed (acknowledged bytes, from delivery callbacks) within
±20 % of the quota — the broker holds it there whatever the machine's speed; bob producing at a
steady offered rate well above alice's quota gets at least 0.8 of the rate he got alone, measured
in the same run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from odradek.client import Admin
from odradek.client.admin import ClientQuotaEntity, NewTopic
from odradek.testing import BrokerProcess

QUOTA = 1_048_576.0  # bytes/s
WINDOWS, WINDOW_S = 2, 1
MESSAGE = b"x" * 10_000
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_alice="alice-secret" user_bob="bob-secret";'
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        Path(tmp_path_factory.mktemp("quotas")) / "data",
        listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        overrides={
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "quota.window.num": WINDOWS,
            "quota.window.size.seconds": WINDOW_S,
            "group.initial.rebalance.delay.ms": 0,  # a group's first join is not held back 3 s
        },
    ).start()
    try:
        yield b
    finally:
        b.stop()


def _sasl(broker: BrokerProcess, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.bootstrap_of("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
    }


class Pusher(threading.Thread):
    """A confluent-kafka producer in its own thread, as fast as it may (``rate`` None) or at an
    offered rate; acknowledged bytes are kept with the time of their delivery callback."""

    def __init__(self, conf: dict[str, Any], topic: str, rate: float | None = None) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.rate = rate
        self.acks: list[tuple[float, int]] = []
        self.errors: list[str] = []
        self.throttles: list[int] = []
        self.produced = 0
        self.stop_flag = threading.Event()
        self.producer = Producer(
            {
                **conf,
                "linger.ms": 5,
                "batch.size": 65536,
                # a small local queue: the producer is always full, and what it holds at the end drains fast
                "queue.buffering.max.messages": 200,
                "throttle_cb": lambda ev: self.throttles.append(int(ev.throttle_time * 1000)),
            }
        )

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acks.append((time.monotonic(), len(msg.value())))

    def run(self) -> None:
        start = time.monotonic()
        while not self.stop_flag.is_set():
            if self.rate is not None:
                wait = start + self.produced * len(MESSAGE) / self.rate - time.monotonic()
                if wait > 0:  # (a negative timeout would wait forever)
                    self.producer.poll(min(wait, 0.05))
                    continue
            try:
                self.producer.produce(self.topic, MESSAGE, on_delivery=self._delivered)
                self.produced += 1
            except BufferError:
                self.producer.poll(0.02)
                continue
            self.producer.poll(0)
        remaining = self.producer.flush(60)
        if remaining:
            self.errors.append(f"{remaining} records not delivered")

    def rate_between(self, t0: float, t1: float) -> float:
        return sum(n for t, n in self.acks if t0 <= t < t1) / (t1 - t0)

    def finish(self) -> None:
        self.stop_flag.set()
        self.join(90)
        assert not self.is_alive()


def _consume_count(broker: BrokerProcess, topic: str, expected: int) -> int:
    """Read the topic back from the start: every record there (until ``expected`` are read and
    nothing more comes for a moment, or 30 s pass)."""
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_of("PLAINTEXT"),
            "group.id": f"count-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    count, idle_since, deadline = 0, time.monotonic(), time.monotonic() + 30
    try:
        while time.monotonic() < deadline and (count < expected or time.monotonic() - idle_since < 1):
            msgs = c.consume(1000, 0.5)
            for m in msgs:
                if m.error() is None:
                    count += 1
            if msgs:
                idle_since = time.monotonic()
    finally:
        c.close()
    return count


def _wait(seconds: float) -> None:
    time.sleep(seconds)  # the measurement windows themselves: what is measured happens meanwhile


def test_producer_byte_rate_holds_alice_not_bob(broker: BrokerProcess) -> None:
    with Admin(bootstrap_servers=broker.bootstrap_of("PLAINTEXT")) as admin:
        admin.create_topics([NewTopic("alice-t", num_partitions=1), NewTopic("bob-t", num_partitions=1)])

        # bob alone: his rate at a steady offered load (well above alice's quota)
        bob = Pusher(_sasl(broker, "bob"), "bob-t", rate=8 * QUOTA)
        bob.start()
        _wait(1.0)
        b0 = time.monotonic()
        _wait(4.0)
        bob_alone = bob.rate_between(b0, time.monotonic())

        admin.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": QUOTA})])
        alice_entity = ClientQuotaEntity.of({"user": "alice"})
        assert admin.describe_client_quotas({"user": "alice"}) == {
            alice_entity: {"producer_byte_rate": QUOTA}
        }

        alice = Pusher(_sasl(broker, "alice"), "alice-t")
        alice.start()
        t0 = time.monotonic()
        # the first full sample window set lets about (num - 1) windows' worth through at once
        _wait(WINDOWS * WINDOW_S + 1.0)
        m0 = time.monotonic()
        _wait(4.0)
        bob_with_alice = bob.rate_between(m0, time.monotonic())
        bob.finish()
        _wait(m0 + 20.0 - time.monotonic())
        m1 = time.monotonic()
        steady = alice.rate_between(m0, m1)
        first = alice.rate_between(t0, m0)

        # the quota changes while alice runs: twice as much
        admin.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": 2 * QUOTA})])
        _wait(2.0)
        c0 = time.monotonic()
        _wait(8.0)
        doubled = alice.rate_between(c0, time.monotonic())
        # and removed: what alice still holds drains at once
        admin.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": None})])
        assert admin.describe_client_quotas({"user": "alice"}) == {}
        alice.finish()

    print(
        f"alice: first window set {first / QUOTA:.2f} MiB/s, steady {steady / QUOTA:.3f} MiB/s over 20 s, "
        f"after the change to 2 MiB/s {doubled / QUOTA:.2f} MiB/s; throttled {len(alice.throttles)} times "
        f"(max {max(alice.throttles, default=0)} ms); bob alone {bob_alone / QUOTA:.2f} MiB/s, "
        f"with alice throttled {bob_with_alice / QUOTA:.2f} MiB/s (ratio {bob_with_alice / bob_alone:.2f})"
    )
    assert steady == pytest.approx(QUOTA, rel=0.2)
    assert alice.throttles and max(alice.throttles) > 0
    assert bob_with_alice >= 0.8 * bob_alone
    assert not bob.throttles
    assert 1.4 * QUOTA <= doubled <= 2.6 * QUOTA
    # nothing lost: every acknowledged record is there, none failed
    assert not alice.errors and not bob.errors
    assert len(alice.acks) == alice.produced and len(bob.acks) == bob.produced
    assert _consume_count(broker, "alice-t", alice.produced) == alice.produced
    assert _consume_count(broker, "bob-t", bob.produced) == bob.produced


def test_no_throttle_without_quota(broker: BrokerProcess) -> None:
    """A user without any quota is never throttled (and the sensors stay out of the way)."""
    p = Producer({**_sasl(broker, "bob"), "throttle_cb": lambda ev: pytest.fail(f"throttled: {ev}")})
    for _ in range(200):
        p.produce("bob-t", MESSAGE)
    assert p.flush(30) == 0


def test_consumer_byte_rate_per_client_id(broker: BrokerProcess) -> None:
    """A client-id quota on fetches: a consumer reading a backlog is held to it, told so, and reads
    every record; the charge is the fetch response's size."""
    n = 1000  # 10 MB of backlog
    p = Producer({"bootstrap.servers": broker.bootstrap_of("PLAINTEXT"), "linger.ms": 5})
    for _ in range(n):
        p.produce("backlog", MESSAGE)
    assert p.flush(30) == 0
    quota = 2 * QUOTA
    with Admin(bootstrap_servers=broker.bootstrap_of("PLAINTEXT")) as admin:
        admin.alter_client_quotas([({"client-id": "slow-reader"}, {"consumer_byte_rate": quota})])
        throttles: list[float] = []
        c = Consumer(
            {
                "bootstrap.servers": broker.bootstrap_of("PLAINTEXT"),
                "client.id": "slow-reader",
                "group.id": "slow-readers",
                "auto.offset.reset": "earliest",
                "throttle_cb": lambda ev: throttles.append(ev.throttle_time),
            }
        )
        c.subscribe(["backlog"])
        got: list[tuple[float, int]] = []
        deadline = time.monotonic() + 40
        try:
            while len(got) < n and time.monotonic() < deadline:
                for m in c.consume(100, 0.2):
                    if m.error() is None:
                        got.append((time.monotonic(), len(m.value())))
        finally:
            c.close()
        admin.alter_client_quotas([({"client-id": "slow-reader"}, {"consumer_byte_rate": None})])
    assert len(got) == n
    assert throttles and max(throttles) > 0
    # past the first window set, no faster than the quota (the record bytes are most of a response)
    start = got[0][0] + WINDOWS * WINDOW_S
    rest = [(t, size) for t, size in got if t >= start]
    if len(rest) > 100:
        rate = sum(size for _t, size in rest) / max(rest[-1][0] - start, 1e-3)
        print(f"consumer held to {rate / QUOTA:.2f} MiB/s by a {quota / QUOTA:.0f} MiB/s quota")
        assert rate <= 1.3 * quota


def test_request_percentage_throttles_a_busy_client(broker: BrokerProcess) -> None:
    """request_percentage charges the time handlers spend on a client's requests: a client id
    allowed 0.5 % of one thread, sending request after request, is told to back off."""
    with Admin(bootstrap_servers=broker.bootstrap_of("PLAINTEXT")) as admin:
        admin.alter_client_quotas([({"client-id": "busy"}, {"request_percentage": 0.5})])
        throttles: list[float] = []
        p = Producer(
            {
                "bootstrap.servers": broker.bootstrap_of("PLAINTEXT"),
                "client.id": "busy",
                "linger.ms": 0,
                "throttle_cb": lambda ev: throttles.append(ev.throttle_time),
            }
        )
        sent, deadline = 0, time.monotonic() + 20
        while not throttles and time.monotonic() < deadline:
            p.produce("busy-t", b"x")
            sent += 1
            assert p.flush(30) == 0  # throttled, never refused
        admin.alter_client_quotas([({"client-id": "busy"}, {"request_percentage": None})])
    assert throttles and max(throttles) > 0, f"no throttle after {sent} requests"
