"""Client quotas in ZooKeeper, in Kafka's layout: ``/config/users/<user>`` (beside the user's SCRAM
credentials), ``/config/users/<user>/clients/<client-id>``, ``/config/clients/<client-id>``, values as
strings, and a ``/config/changes/config_change_`` notification; every broker applies a change
(made through any broker, or written straight into ZooKeeper as kafka-configs --zookeeper does),
and again after a restart."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.client import Admin
from odradek.client.admin import ClientQuotaEntity
from odradek.coordination.zkserver import ZooKeeperServer
from odradek.testing import wait_for
from tests.cluster.conftest import Cluster, require_zookeeper

P, C = "producer_byte_rate", "consumer_byte_rate"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    require_zookeeper()
    zk = ZooKeeperServer(tmp_path / "zk")
    zk.start()
    c = Cluster(zk, tmp_path / "cluster", 2)
    try:
        c.start_all()
        c.wait_for_registered()
        yield c
    finally:
        c.close()
        zk.stop()


def _admin(cluster: Cluster, i: int) -> Admin:
    return Admin(bootstrap_servers=cluster.broker(i).bootstrap)


def _seen(admin: Admin, entity: ClientQuotaEntity, quotas: dict[str, float] | None) -> bool:
    return admin.describe_client_quotas().get(entity) == quotas


def test_quotas_in_zookeeper(cluster: Cluster) -> None:
    alice, pair = (
        ClientQuotaEntity.of({"user": "alice"}),
        ClientQuotaEntity.of({"user": "alice", "client-id": "c/1"}),
    )
    with _admin(cluster, 1) as a1, _admin(cluster, 2) as a2:
        a1.alter_user_scram_credentials([("alice", "SCRAM-SHA-256", "alice-secret", 4096)])
        t0 = time.monotonic()
        a1.alter_client_quotas([({"user": "alice"}, {P: 1048576}), (pair.as_dict(), {C: 2048})])
        # broker 2 learns it from the change notification
        wait_for(
            lambda: _seen(a2, alice, {P: 1048576.0}) and _seen(a2, pair, {C: 2048.0}), 5, "broker 2 sees it"
        )
        applied = time.monotonic() - t0
        node = json.loads(cluster.zk_get("/config/users/alice") or b"null")
        assert node["version"] == 1
        assert node["config"][P] == "1048576.0"
        assert "SCRAM-SHA-256" in node["config"]  # the credentials stay
        assert json.loads(cluster.zk_get("/config/users/alice/clients/c%2F1") or b"null") == {
            "version": 1,
            "config": {C: "2048.0"},
        }
        entities = [
            json.loads(cluster.zk_get(f"/config/changes/{n}") or b"null")["entity_path"]
            for n in cluster.zk_children("/config/changes")
        ]
        assert "users/alice" in entities and "users/alice/clients/c%2F1" in entities
        # the credentials still work after the quota change
        assert a2.describe_user_scram_credentials(["alice"]) == {"alice": {"SCRAM-SHA-256": 4096}}

        # written into ZooKeeper by another tool (kafka-configs --zookeeper): both brokers follow
        zk = cluster.kazoo()
        zk.create(
            "/config/clients/<default>",
            json.dumps({"version": 1, "config": {C: "500"}}).encode(),
            makepath=True,
        )
        zk.create(
            "/config/changes/config_change_",
            json.dumps({"version": 2, "entity_path": "clients/<default>"}).encode(),
            sequence=True,
        )
        default = ClientQuotaEntity.of({"client-id": None})
        for a in (a1, a2):
            wait_for(lambda a=a: _seen(a, default, {C: 500.0}), 5, "the default client quota")

        # removed through broker 2: gone everywhere; the user's node keeps the credentials only
        a2.alter_client_quotas([({"user": "alice"}, {P: None})])
        wait_for(lambda: _seen(a1, alice, None), 5, "broker 1 sees the removal")
        assert json.loads(cluster.zk_get("/config/users/alice") or b"null")["config"].keys() == {
            "SCRAM-SHA-256"
        }

    cluster.restart(2, clean=False)
    with _admin(cluster, 2) as a2:
        assert a2.describe_client_quotas() == {pair: {C: 2048.0}, default: {C: 500.0}}
    print(f"a quota altered on broker 1 was applied by broker 2 after {applied:.2f} s")
