"""Operating a cluster when things go wrong: shutdown with ZooKeeper gone, config read-your-write,
``odradek cluster stop-broker/start-broker/restart-broker/kill-broker`` and live state from ZooKeeper."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest

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
