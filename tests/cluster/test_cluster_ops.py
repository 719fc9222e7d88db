"""Operating a cluster when things go wrong: shutdown with ZooKeeper gone, config read-your-write,
``odradek cluster stop-broker/start-broker/restart-broker/kill-broker`` and live state from ZooKeeper."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest

from odradek.client._network import BrokerConnection

from .conftest import Cluster

pytestmark = pytest.mark.slow


def _exit_within(cluster: Cluster, i: int, limit: float) -> int | None:
    """SIGTERM broker ``i``; its exit status if it exits within ``limit`` s, else None (then SIGKILLed)."""
    proc = cluster.brokers[i].proc
    assert proc is not None
    proc.terminate()
    try:
        return proc.wait(limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        return None


@pytest.mark.parametrize("size", [1, 3])
def test_broker_stops_within_15s_of_sigterm_when_zookeeper_is_gone(
    cluster_factory: Callable[..., Cluster], size: int
) -> None:
    # Kafka's defaults: zookeeper.session.timeout.ms=18000, 3 controlled-shutdown attempts 5 s apart
    cluster = cluster_factory(size, log_level="INFO")
    cluster.wait_for_registered()
    controller = cluster.wait_for_controller()
    cluster.zk.stop()
    # the controller itself and (in a cluster) a broker that must ask the controller
    victims = [controller, *[i for i in cluster.ids if i != controller][:1]]
    for i in victims:
        status = _exit_within(cluster, i, 15.0)
        assert status == 0, f"broker {i} did not exit cleanly within 15 s of SIGTERM ({status}):\n{cluster.logs(i, 40)}"


def _alter_retention(conn: BrokerConnection, topic: str, value: str) -> None:
    from odradek.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest as Req

    resp = conn.request(
        Req(
            resources=[
                Req.AlterConfigsResource(
                    resource_type=2,
                    resource_name=topic,
                    configs=[Req.AlterableConfig(name="retention.ms", config_operation=0, value=value)],
                )
            ],
            validate_only=False,
        ),
        1,
    )
    assert resp.responses[0].error_code == 0, resp


def _retention(conn: BrokerConnection, topic: str) -> str | None:
    from odradek.protocol.messages.describe_configs import DescribeConfigsRequest as Req

    resp = conn.request(
        Req(
            resources=[Req.DescribeConfigsResource(resource_type=2, resource_name=topic, configuration_keys=["retention.ms"])],
            include_synonyms=False,
        ),
        1,
    )
    result = resp.results[0]
    assert result.error_code == 0, result
    return next(c.value for c in result.configs if c.name == "retention.ms")


def test_describe_configs_reads_the_alter_at_once(cluster_factory: Callable[..., Cluster]) -> None:
    """Kafka answers a config alter after writing it to ZooKeeper, and DescribeConfigs (in ZooKeeper
    mode) reads ZooKeeper: the new value is seen at once through the broker that handled the alter
    and through any other broker."""
    from odradek.client._network import Cluster as Net

    cluster = cluster_factory(3)
    cluster.wait_for_registered()
    cluster.wait_for_controller()
    net = Net(cluster.bootstrap, timeout=20)
    try:
        from odradek.protocol.messages.create_topics import CreateTopicsRequest as Create

        cluster.wait_for(lambda: len(net.metadata().brokers) == 3, 20, "3 brokers in the metadata")
        ctl = net.node(cluster.controller_id() or 1)
        created = ctl.request(
            Create(topics=[Create.CreatableTopic(name="cfg", num_partitions=1, replication_factor=3)], timeout_ms=20000), 4
        )
        assert created.topics[0].error_code == 0, created
        a, b = net.node(1), net.node(2)
        cluster.wait_for(lambda: all(_retention(c, "cfg") is not None for c in (a, b)), 20, "topic known everywhere")
        stale_a, stale_b = [], []
        for i in range(20):
            value = str(3_600_000 + i)
            _alter_retention(a, "cfg", value)
            if (got := _retention(a, "cfg")) != value:
                stale_a.append((value, got))
            if (got := _retention(b, "cfg")) != value:
                stale_b.append((value, got))
        assert not stale_a, f"the broker that handled the alter answered old values: {stale_a}"
        assert not stale_b, f"another broker answered old values right after the alter: {stale_b}"
    finally:
        net.close()
