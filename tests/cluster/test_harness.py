"""The Cluster test harness itself: brokers register, a controller is elected, restarts keep ports.

Needs ``odradek serve --zookeeper`` (brokers registering in ZooKeeper and electing a controller).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from odradek.coordination.zkserver import ZooKeeperServer, process_alive

from .conftest import Cluster

pytestmark = pytest.mark.slow

OVERRIDES = {"zookeeper.session.timeout.ms": 6000, "replica.lag.time.max.ms": 5000}


def test_brokers_register_and_elect_a_controller(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3, OVERRIDES)
    cluster.wait_for_registered(timeout=30)
    assert cluster.registered_brokers() == [1, 2, 3]
    for i in cluster.ids:
        info = cluster.zk_json(f"/brokers/ids/{i}")
        assert info["port"] == cluster.broker(i).port
        assert f"PLAINTEXT://127.0.0.1:{cluster.broker(i).port}" in info["endpoints"]
    assert cluster.wait_for_controller(30) in (1, 2, 3)
    assert len(cluster.bootstrap.split(",")) == 3


def test_restart_keeps_port_and_registration(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3, OVERRIDES)
    cluster.wait_for_registered(timeout=30)
    port, pid = cluster.broker(2).port, cluster.broker(2).pid

    cluster.kill(2)
    assert not process_alive(pid)
    # the killed broker's session (and so its /brokers/ids/2) lives on until ZooKeeper expires it
    cluster.wait_for(lambda: 2 not in cluster.registered_brokers(), 30, "broker 2's session to expire")
    cluster.restart(2)
    assert cluster.broker(2).port == port and cluster.broker(2).pid != pid
    cluster.wait_for_registered(timeout=30)


def test_stop_all_ends_every_process(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(2, OVERRIDES)
    pids = [cluster.broker(i).pid for i in cluster.ids]
    cluster.sigstop(1)
    cluster.stop_all()  # continues the frozen broker first
    assert not any(process_alive(pid) for pid in pids)


def test_clusters_on_a_shared_zookeeper_get_their_own_chroot(
    zookeeper: ZooKeeperServer, cluster_factory: Callable[..., Cluster]
) -> None:
    a = cluster_factory(1, OVERRIDES, zk=zookeeper)
    b = cluster_factory(1, OVERRIDES, zk=zookeeper)
    assert a.chroot != b.chroot
    a.wait_for_registered(timeout=30)
    b.wait_for_registered(timeout=30)
    assert a.registered_brokers() == b.registered_brokers() == [1]
