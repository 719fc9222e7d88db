"""``/metrics`` in a 3-broker cluster: a frozen follower makes its partition under-replicated on
the leader's endpoint, and it is back to 0 once the follower resumes and rejoins the ISR."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.broker.test_metrics import scrape, value
from tests.cluster.conftest import Cluster
from tests.cluster.test_replication import create_topic, isr_full

pytestmark = pytest.mark.slow

OVERRIDES = {
    "metrics.port": 0,  # off by default in a cluster
    # the frozen follower keeps its ZooKeeper session: only the leader's ISR rule removes it
    "zookeeper.session.timeout.ms": 30000,
    "replica.lag.time.max.ms": 2000,
    "auto.leader.rebalance.enable": False,
}


def test_under_replicated_partitions_follow_a_frozen_follower(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3, OVERRIDES)
    urls = {i: cluster.broker(i).metrics_url for i in cluster.ids}
    assert all(urls.values()), urls
    topic = "watched"
    leader, follower = 1, 2
    create_topic(cluster.bootstrap, topic, assignment=[[leader, follower, 3]])
    cluster.wait_for(lambda: isr_full(cluster, topic, 1), 30, "a full ISR")

    def urp(i: int) -> float:
        return value(scrape(str(urls[i])), "kafka_server_replicamanager_underreplicatedpartitions")

    cluster.wait_for(lambda: urp(leader) == 0, 20, "no under-replicated partition")
    samples = {i: scrape(str(urls[i])) for i in cluster.ids}
    assert sum(value(s, "kafka_controller_kafkacontroller_activecontrollercount") for s in samples.values()) == 1
    assert value(samples[leader], "kafka_server_replicamanager_leadercount") == 1
    assert value(samples[follower], "kafka_server_replicamanager_partitioncount") == 1
    assert value(samples[follower], "kafka_server_replicamanager_leadercount") == 0

    cluster.sigstop(follower)
    try:
        cluster.wait_for(lambda: urp(leader) == 1, 30, "the partition under-replicated on its leader")
        m: dict[str, Any] = scrape(str(urls[leader]))
        assert value(m, "kafka_server_replicamanager_isrshrinks") >= 1
        assert value(m, "kafka_server_replicamanager_underminisrpartitioncount") == 0
    finally:
        cluster.sigcont(follower)
    cluster.wait_for(lambda: urp(leader) == 0, 30, "the follower back in the ISR")
    assert value(scrape(str(urls[leader])), "kafka_server_replicamanager_isrexpands") >= 1
