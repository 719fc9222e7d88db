"""A follower starts fetching a partition as soon as it learns of it, not one long poll later.

The brokers poll with ``replica.fetch.wait.max.ms`` and back off ``replica.fetch.backoff.ms``
at one minute each, so a follower that waited out its poll (a fetcher already polling the same
leader for another partition), or backed off a whole ``replica.fetch.backoff.ms`` because the
leader had not applied its LeaderAndIsr yet (the controller sends both at once), would hold an
``acks=all`` write past the producer's 20 s ``message.timeout.ms``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.cluster.conftest import Cluster
from tests.cluster.test_replication import create_topic, isr_full

pytestmark = pytest.mark.slow

MINUTE_POLLS = {
    "replica.fetch.wait.max.ms": 60000,
    "replica.fetch.backoff.ms": 60000,
    "replica.socket.timeout.ms": 90000,
    "replica.lag.time.max.ms": 180000,
}


def _produce_one(producer: Producer, topic: str) -> None:
    outcome: list[Any] = []
    producer.produce(topic, b"first", partition=0, on_delivery=lambda err, msg: outcome.append(err))
    left = producer.flush(40)
    assert left == 0 and outcome == [None], f"{topic}: {outcome or 'no delivery report'}"


def test_a_new_partition_is_replicated_without_waiting_out_a_poll(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3, MINUTE_POLLS)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0,
                         "message.timeout.ms": 20000})
    try:
        for topic in ("first", "second", "third"):
            # the same leader: after the first topic, the followers' fetchers for broker 1 are
            # long-polling it (nothing more is written to the earlier topics)
            create_topic(cluster.bootstrap, topic, assignment=[[1, 2, 3]])
            cluster.wait_for(lambda t=topic: isr_full(cluster, t, 1), 30, f"{topic}: leader and ISR")
            _produce_one(producer, topic)  # acknowledged once both followers have fetched it
    finally:
        producer.flush(5)


def test_a_follower_moves_to_a_new_leader_without_waiting_out_a_poll(
    cluster_factory: Callable[..., Cluster],
) -> None:
    cluster = cluster_factory(3, MINUTE_POLLS)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0,
                         "message.timeout.ms": 20000, "topic.metadata.refresh.interval.ms": 1000})
    try:
        # broker 3 follows both; "other" gives it a fetcher for broker 2 that long-polls it
        for topic, replicas in (("moving", [1, 2, 3]), ("other", [2, 3, 1])):
            create_topic(cluster.bootstrap, topic, assignment=[replicas])
            cluster.wait_for(lambda t=topic: isr_full(cluster, t, 1), 30, f"{topic}: leader and ISR")
            _produce_one(producer, topic)
        cluster.stop(1)  # controlled shutdown: broker 2 leads "moving", broker 3 now fetches it from 2
        cluster.wait_for(lambda: cluster.leader("moving", 0) == 2, 30, "broker 2 leading")
        # the follower truncates at the new leader (OffsetForLeaderEpoch) and fetches from it
        _produce_one(producer, "moving")
    finally:
        producer.flush(5)
