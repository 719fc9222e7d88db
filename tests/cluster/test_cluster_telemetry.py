"""Client-metrics subscriptions (KIP-714) in a ZooKeeper cluster: one set through one broker is
kept in ZooKeeper (``/config/client-metrics``) and given to clients by every broker."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from odradek.protocol.messages.get_telemetry_subscriptions import GetTelemetrySubscriptionsRequest
from odradek.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from odradek.testing import WireClient
from tests.cluster.conftest import Cluster

pytestmark = pytest.mark.slow


def test_a_subscription_set_through_one_broker_is_given_by_the_other(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(2, {"metrics.port": 0})  # telemetry is served where metrics are on
    one, two = (cluster.broker(i) for i in cluster.ids)
    R = IncrementalAlterConfigsRequest
    w1 = WireClient(one.host, one.port, "tel-admin")
    w2 = WireClient(two.host, two.port, "tel-app")
    try:
        altered = w1.request(R(resources=[R.AlterConfigsResource(resource_type=16, resource_name="zk-sub", configs=[
            R.AlterableConfig(name="metrics", config_operation=0, value="org.apache.kafka.consumer."),
            R.AlterableConfig(name="interval.ms", config_operation=0, value="2000"),
        ])]), 1).responses[0]
        assert altered.error_code == 0

        def subscribed() -> bool:
            got = w2.request(GetTelemetrySubscriptionsRequest(), 0)  # a new instance each time: never throttled
            return got.error_code == 0 and got.requested_metrics == ["org.apache.kafka.consumer."] and (
                got.push_interval_ms == 2000
            )

        cluster.wait_for(subscribed, 30, "the other broker giving the subscription")
    finally:
        w1.close()
        w2.close()
