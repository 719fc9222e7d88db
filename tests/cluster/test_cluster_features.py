"""Finalized features in a ZooKeeper cluster (KIP-584): an UpdateFeatures on one broker is stored
in ``/feature`` (Kafka's FeatureZNode v2), every other broker follows it through its watch and
advertises the new level in ApiVersions, and a restarted broker reads it back."""

from __future__ import annotations

import json
from collections.abc import Callable

from odradek.client.admin import Admin
from odradek.client.admin._features import SAFE_DOWNGRADE, UPGRADE
from odradek.protocol.messages.api_versions import ApiVersionsRequest
from odradek.testing import BrokerProcess, WireClient, wait_for

from .conftest import Cluster

T = 30.0


def _finalized(b: BrokerProcess) -> dict[str, int]:
    w = WireClient(b.host, b.port, "features-test")
    try:
        r = w.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 4)
        return {f.name: f.max_version_level for f in r.finalized_features}  # type: ignore[attr-defined]
    finally:
        w.close()


def test_a_feature_change_reaches_every_broker_and_outlives_a_restart(
    cluster_factory: Callable[..., Cluster],
) -> None:
    cluster = cluster_factory(2)
    b1, b2 = cluster.broker(1), cluster.broker(2)
    assert _finalized(b2)["transaction.version"] == 2  # the default of a cluster that never changed it

    with Admin(bootstrap_servers=b1.bootstrap) as admin:
        admin.update_features({"transaction.version": (1, SAFE_DOWNGRADE)})
    # the other broker follows /feature through its watch (no request to it in between)
    wait_for(lambda: _finalized(b2).get("transaction.version") == 1, T, "broker 2 to advertise transaction.version 1")
    assert _finalized(b1)["transaction.version"] == 1
    data, stat = cluster.kazoo().get("/feature")
    stored = json.loads(data)
    assert (stored["version"], stored["status"]) == (2, 1)
    assert stored["features"]["transaction.version"] == {"max_version_level": 1}

    b2 = cluster.restart(2)
    assert _finalized(b2)["transaction.version"] == 1

    with Admin(bootstrap_servers=b2.bootstrap) as admin:
        admin.update_features({"transaction.version": (2, UPGRADE)})
    wait_for(lambda: _finalized(b1).get("transaction.version") == 2, T, "broker 1 to advertise transaction.version 2")
    assert cluster.kazoo().get("/feature")[1].version == stat.version + 1  # the epoch
