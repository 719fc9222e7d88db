"""KIP-73 replication throttles during a reassignment: a new replica catching up on a throttled
partition copies at no more than the configured rate, both from the leader's side and from the
follower's; an unthrottled partition is not held; every record arrives."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from odradek.client import Admin
from odradek.client.admin import NewTopic
from tests.cluster.conftest import Cluster
from tests.cluster.test_replication import _reassign

TIMEOUT = 120.0
RATE = 1_000_000  # bytes/s
RECORDS, VALUE = 6000, 1000  # about 6 MB


def _log_bytes(data_dir: Path, topic: str) -> int:
    d = data_dir / f"{topic}-0"
    return sum(f.stat().st_size for f in d.glob("*.log")) if d.is_dir() else 0


def _fill(bootstrap: str, topic: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "1"})
    for i in range(RECORDS):
        while True:
            try:
                p.produce(topic, value=bytes([i % 251]) * VALUE, partition=0)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(TIMEOUT) == 0


def _alter(admin: AdminClient, resource: ConfigResource) -> None:
    admin.incremental_alter_configs([resource])[resource].result(timeout=TIMEOUT)


def _catch_up(cluster: Cluster, topic: str, follower: int, target: int) -> tuple[float, list[tuple[float, int]]]:
    """Seconds until ``follower`` holds ``target`` bytes of the partition, and its samples."""
    samples: list[tuple[float, int]] = []
    t0 = time.monotonic()
    deadline = t0 + TIMEOUT
    while time.monotonic() < deadline:
        size = _log_bytes(cluster.broker(follower).data_dir, topic)
        samples.append((time.monotonic() - t0, size))
        if size >= target:
            return time.monotonic() - t0, samples
        time.sleep(0.1)
    raise AssertionError(f"broker {follower} did not catch up: {samples[-5:]}\n{cluster.logs(follower)}\n{cluster.logs(1)}")


def test_reassignment_respects_replication_throttles(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(overrides={"replication.quota.window.num": 2, "replication.quota.window.size.seconds": 1})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    throttled, free = f"thr-{uuid.uuid4().hex[:6]}", f"free-{uuid.uuid4().hex[:6]}"
    with Admin(bootstrap_servers=cluster.bootstrap) as odradek_admin:
        odradek_admin.create_topics([NewTopic(t, assignments=[[1]]) for t in (throttled, free)], timeout=TIMEOUT)
    for t in (throttled, free):
        cluster.wait_for(lambda t=t: cluster.leader(t, 0) == 1, TIMEOUT, f"{t} led by broker 1")
        _fill(cluster.bootstrap, t)
    size = _log_bytes(cluster.broker(1).data_dir, throttled)
    assert size >= RECORDS * VALUE

    # Kafka's settings, as kafka-reassign-partitions --throttle writes them: the rates on the
    # brokers on each side, and which replicas of the topic are throttled
    _alter(admin, ConfigResource("topic", throttled, incremental_configs=[
        _set("leader.replication.throttled.replicas", "0:1"),
        _set("follower.replication.throttled.replicas", "0:2"),
    ]))
    for broker, name in ((1, "leader.replication.throttled.rate"), (2, "follower.replication.throttled.rate")):
        _alter(admin, ConfigResource("broker", str(broker), incremental_configs=[_set(name, str(RATE))]))

    _reassign(cluster, throttled, {0: [1, 2]})
    elapsed, samples = _catch_up(cluster, throttled, 2, size)
    # the first window lets about a second's worth through at once; the rest comes at the rate
    # (more load can only slow the copy down: an upper bound on the rate is safe to assert)
    print(f"throttled catch-up: {size} bytes in {elapsed:.1f}s ({size / elapsed / 1e6:.2f} MB/s)")
    assert elapsed >= (size - 2 * RATE) / RATE / 1.3, (elapsed, samples[-3:])
    t1, b1 = next((t, b) for t, b in samples if t >= 1.5)
    t2, b2 = samples[-1]
    assert t2 > t1 and (b2 - b1) / (t2 - t1) <= 1.5 * RATE, (t1, b1, t2, b2)
    cluster.wait_for(lambda: sorted(cluster.isr(throttled, 0)) == [1, 2], TIMEOUT, "broker 2 in the ISR")

    # the unthrottled topic (no *.replication.throttled.replicas) is copied at full speed,
    # although the same brokers' rates are set
    free_size = _log_bytes(cluster.broker(1).data_dir, free)
    _reassign(cluster, free, {0: [1, 3]})
    free_elapsed, _ = _catch_up(cluster, free, 3, free_size)
    print(f"unthrottled catch-up: {free_size} bytes in {free_elapsed:.1f}s")
    cluster.wait_for(lambda: sorted(cluster.isr(free, 0)) == [1, 3], TIMEOUT, "broker 3 in the ISR")
    # every byte arrived: the replicas' logs are the leader's
    assert _log_bytes(cluster.broker(2).data_dir, throttled) == size
    assert _log_bytes(cluster.broker(3).data_dir, free) == free_size


def _set(name: str, value: str) -> object:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    return ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)


def test_a_follower_keeps_the_whole_batches_of_a_cut_response() -> None:
    """A leader's response stops at replica.fetch.max.bytes, inside a batch: the follower
    appends the whole batches before it (it used to refuse the response and retry forever)."""
    from odradek.broker.fetcher import _whole_entries
    from odradek.records import BatchBuilder

    batches = []
    for _ in range(2):
        b = BatchBuilder()
        for i in range(10):
            b.append(i, None, bytes(100), [])
        batches.append(bytes(b.build()))
    whole = batches[0] + batches[1]
    assert _whole_entries(whole) == whole
    cut = whole[: len(batches[0]) + 50]
    assert bytes(_whole_entries(cut)) == batches[0]
    assert bytes(_whole_entries(whole[:30])) == b""
    bad = bytearray(whole)
    bad[8:12] = (0).to_bytes(4, "big")  # not a size: left for the log's validation to refuse
    assert _whole_entries(bad) is bad


def test_a_held_back_partition_is_fetched_again_when_the_rate_allows() -> None:
    """Over the follower throttle, the partitions it counts are left out of the next fetch, and
    that fetch's long poll of the other partitions lasts only until the rate is back under the
    bound (a full replica.fetch.wait.max.ms each time left a copy at about 80% of the rate)."""
    from types import SimpleNamespace

    from odradek.broker.fetcher import ReplicaFetcher, _FetchState
    from odradek.broker.quotas import ReplicationQuota
    from odradek.config import BrokerConfig

    config = BrokerConfig({"follower.replication.throttled.rate": "1000", "replication.quota.window.num": "2"})
    fetcher = object.__new__(ReplicaFetcher)
    fetcher.broker_id = 3
    fetcher.quota = ReplicationQuota(config, "follower")

    def state(topic: str, throttled: str) -> _FetchState:
        log = SimpleNamespace(config=SimpleNamespace(follower_replication_throttled_replicas=throttled))
        return _FetchState(SimpleNamespace(topic=topic, index=0, log=log), truncating=False)  # type: ignore[arg-type]

    moving, other = state("moving", "0:3"), state("other", "")
    kept, counted = fetcher._throttle([moving, other])
    assert kept == [moving, other] and counted == {("moving", 0)} and fetcher._held_ms == 0
    fetcher.quota.record(5000, time.monotonic() * 1000.0)  # 5 s worth at 1000 B/s
    kept, counted = fetcher._throttle([moving, other])
    assert kept == [other] and counted == set()
    assert 0 < fetcher._held_ms <= 5000
